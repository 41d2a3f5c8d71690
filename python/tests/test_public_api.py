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
    "BadStream",
    "AsyncClient",
    "AsyncLock",
    "AsyncObservations",
    "AsyncSession",
    "AsyncSessionPool",
    "AsyncSessionWatch",
    "AsyncTerm",
    "AsyncWatch",
    "Client",
    "ConfigError",
    "ConnectError",
    "ConnectionClosed",
    "DuplicateAcquire",
    "EmptyName",
    "ExpectedAcquire",
    "HeartbeatTimeout",
    "Holder",
    "InvalidLease",
    "InvalidMode",
    "LeaderState",
    "LimitMismatch",
    "Lock",
    "LockBusy",
    "LockLost",
    "LockReleased",
    "LockState",
    "LostCallback",
    "MonolockError",
    "NameNotUTF8",
    "NameTooLong",
    "NotActive",
    "NotAuthorized",
    "NotMonolock",
    "Observation",
    "Observations",
    "ProtocolViolation",
    "ServerEnded",
    "ServerError",
    "Session",
    "SessionPool",
    "SessionWatch",
    "SharedUnsupported",
    "ShuttingDown",
    "Term",
    "TooManyStreams",
    "UnknownMessage",
    "UnsupportedVersion",
    "ValueTooLong",
    "ValueUnsupported",
    "Waiter",
    "WaitingCallback",
    "Watch",
    "WatchTimeout",
    "WatcherBehind",
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
    for method in ("acquire", "try_acquire", "lock", "semaphore"):
        sync = inspect.signature(getattr(monolock.Client, method))
        asyn = inspect.signature(getattr(monolock.AsyncClient, method))
        # Same parameters, except the sync-only cancel event.
        assert [p for p in sync.parameters if p != "cancel"] == list(asyn.parameters)
    sync_lock = {n for n in dir(monolock.Lock) if not n.startswith("_")}
    async_lock = {n for n in dir(monolock.AsyncLock) if not n.startswith("_")}
    assert sync_lock == async_lock
    assert inspect.iscoroutinefunction(monolock.AsyncLock.release)


def test_sync_and_async_elections_have_the_same_shape() -> None:
    for method in ("watch", "campaign", "observe", "leader"):
        sync = inspect.signature(getattr(monolock.Client, method))
        asyn = inspect.signature(getattr(monolock.AsyncClient, method))
        assert [p for p in sync.parameters if p != "cancel"] == list(asyn.parameters)
    pairs = [
        (monolock.Watch, monolock.AsyncWatch),
        (monolock.Term, monolock.AsyncTerm),
        (monolock.Observations, monolock.AsyncObservations),
    ]
    for sync_type, async_type in pairs:
        sync_names = {n for n in dir(sync_type) if not n.startswith("_")}
        async_names = {n for n in dir(async_type) if not n.startswith("_")}
        assert sync_names - {"close"} == async_names - {"aclose", "close"}, sync_type


def test_readme_error_table_matches_the_spec() -> None:
    from .support import load_spec

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    for entry in load_spec("errors.json")["errors"]:
        name = monolock.errors.ERRORS_BY_CODE[entry["code"]].__name__
        row = f"| `{name}` | 0x{entry['code']:02x} | "
        row += "yes" if entry["temporary"] else "no"
        assert row in readme, row


def test_readme_stands_alone() -> None:
    """PyPI shows the README without the repository around it: every link
    is absolute, and developer sections live in DEVELOPMENT.md."""
    import re

    here = Path(__file__).parent.parent
    readme = (here / "README.md").read_text()
    links = re.findall(r"\]\(([^)]+)\)", readme)
    assert links, "no links"
    relative = [link for link in links if not link.startswith("https://")]
    assert relative == []
    for doc in ("docs/protocol.md", "docs/how-it-works.md"):
        assert f"https://github.com/monolock/monolock/blob/main/{doc}" in links, doc
    assert "## Development" not in readme and "MONOLOCK_BIN" not in readme
    assert (here / "DEVELOPMENT.md").is_file()
    assert "pip install ./python" in readme  # the from-clone install line


def test_project_urls() -> None:
    text = (Path(__file__).parent.parent / "pyproject.toml").read_text()
    urls = text.split("[project.urls]", 1)[1].split("\n[", 1)[0]
    for key in ("Homepage", "Repository", "Issues", "Documentation"):
        assert f'\n{key} = "https://github.com/monolock/monolock' in urls, key


def test_scripts_print_no_top_level_step_markers() -> None:
    """'==>' marks the steps of test:all; nested scripts use '[python]'."""
    scripts = Path(__file__).parent.parent / "scripts"
    for script in scripts.iterdir():
        assert "==>" not in script.read_text(), script.name
