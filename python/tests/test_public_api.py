"""The public surface is pinned, documented and typed."""

from __future__ import annotations

import inspect
from pathlib import Path

import monolock
import monolock.aio
import monolock.client
import monolock.errors

EXPECTED = {
    "DEFAULT_LEASE",
    "DEFAULT_PORT",
    "DEFAULT_SERVER",
    "AcquireCancelled",
    "AcquireTimeout",
    "Address",
    "AdminClosed",
    "AsyncClient",
    "AsyncLock",
    "Client",
    "ConnectError",
    "ConnectionClosed",
    "DuplicateAcquire",
    "EmptyName",
    "ExpectedAcquire",
    "HeartbeatTimeout",
    "InvalidLease",
    "Lock",
    "LockBusy",
    "LockLost",
    "LockReleased",
    "LostCallback",
    "MonolockError",
    "NameNotUTF8",
    "NameTooLong",
    "NotAuthorized",
    "NotMonolock",
    "ProtocolViolation",
    "ServerError",
    "ShuttingDown",
    "UnknownMessage",
    "UnsupportedVersion",
    "WaitingCallback",
    "__version__",
    "lock",
}


def test_exports_are_pinned() -> None:
    assert set(monolock.__all__) == EXPECTED
    for name in EXPECTED:
        assert hasattr(monolock, name), name


def test_version_is_defined_once() -> None:
    text = (Path(__file__).parent.parent / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in text
    assert monolock.__version__.count(".") == 2


def public_objects() -> list[tuple[str, object]]:
    modules = [monolock, monolock.aio, monolock.client, monolock.errors]
    seen: list[tuple[str, object]] = []
    for module in modules:
        assert module.__doc__, module.__name__
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                seen.append((f"{module.__name__}.{name}", obj))
                if inspect.isclass(obj) and obj.__module__.startswith("monolock"):
                    for attr, member in vars(obj).items():
                        if attr.startswith("_"):
                            continue
                        if inspect.isfunction(member) or isinstance(member, property):
                            seen.append((f"{module.__name__}.{name}.{attr}", member))
    return seen


def test_every_public_name_has_a_docstring() -> None:
    missing = [name for name, obj in public_objects() if not inspect.getdoc(obj)]
    assert missing == []


def test_py_typed_ships() -> None:
    assert (Path(monolock.__file__).parent / "py.typed").is_file()


def test_sync_and_async_have_the_same_shape() -> None:
    for method in ("acquire", "try_acquire", "lock"):
        sync = inspect.signature(getattr(monolock.Client, method))
        asyn = inspect.signature(getattr(monolock.AsyncClient, method))
        # Same parameters, except the sync-only cancel event.
        assert [p for p in sync.parameters if p != "cancel"] == list(asyn.parameters)
    sync_lock = {n for n in dir(monolock.Lock) if not n.startswith("_")}
    async_lock = {n for n in dir(monolock.AsyncLock) if not n.startswith("_")}
    assert sync_lock == async_lock
    assert inspect.iscoroutinefunction(monolock.AsyncLock.release)


def test_readme_error_table_matches_the_spec() -> None:
    from .support import load_spec

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    for entry in load_spec("errors.json")["errors"]:
        row = f"| `{entry['go_name'][3:]}` | 0x{entry['code']:02x} | "
        row += "yes" if entry["temporary"] else "no"
        assert row in readme, row
