"""Shared locks and semaphores against the real `monolock serve` binary,
with both clients: readers hold together, writers wait for every reader,
arrival order is kept, semaphores bound their holders, and a semaphore's
limit must agree."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

import monolock
from monolock import errors
from monolock.aio import AsyncClient

from .support import Api, LockHandle, RealServer


def unique(prefix: str) -> str:
    return f"py/shared/{prefix}/{uuid.uuid4().hex[:8]}"


def queued_claim(api: Api, server: RealServer, name: str, **kwargs: Any) -> Future[LockHandle]:
    """Start a claim and wait until the server has queued it."""
    queued = threading.Event()
    fut = api.acquire(server.address, name, lease=1, on_waiting=lambda n: queued.set(), **kwargs)
    assert queued.wait(10), "the claim was not queued"
    return fut


def still_waiting(fut: Future[LockHandle], seconds: float = 0.3) -> bool:
    time.sleep(seconds)
    return not fut.done()


def test_readers_hold_together_with_increasing_tokens(api: Api, real_server: RealServer) -> None:
    name = unique("readers")
    readers = [
        api.acquire(real_server.address, name, lease=1, shared=True).result(10) for _ in range(3)
    ]
    tokens = [r.token for r in readers]
    assert tokens == sorted(tokens) and len(set(tokens)) == 3
    for reader in readers:
        assert reader.lock.held and reader.lock.shared and reader.lock.limit is None
    # One more reader also gets it at once.
    extra = api.acquire(real_server.address, name, lease=1, shared=True, try_only=True).result(10)
    assert extra.token > tokens[-1]
    for handle in [*readers, extra]:
        handle.release()


def test_a_writer_waits_for_every_reader(api: Api, real_server: RealServer) -> None:
    name = unique("writer")
    first = api.acquire(real_server.address, name, lease=1, shared=True).result(10)
    second = api.acquire(real_server.address, name, lease=1, shared=True).result(10)
    with pytest.raises(errors.LockBusy):
        api.acquire(real_server.address, name, lease=1, try_only=True).result(10)
    writer = queued_claim(api, real_server, name)
    first.release()
    assert still_waiting(writer), "the writer got the lock while a reader held it"
    second.release()
    held = writer.result(10)
    assert held.token > second.token and not held.lock.shared
    held.release()


def test_a_reader_after_a_waiting_writer_waits_for_it(api: Api, real_server: RealServer) -> None:
    """Arrival order: no reader barges past a queued writer."""
    name = unique("nobarging")
    reader = api.acquire(real_server.address, name, lease=1, shared=True).result(10)
    writer = queued_claim(api, real_server, name)
    with pytest.raises(errors.LockBusy):
        api.acquire(real_server.address, name, lease=1, shared=True, try_only=True).result(10)
    late_reader = queued_claim(api, real_server, name, shared=True)
    reader.release()
    wrote = writer.result(10)
    assert still_waiting(late_reader), "a reader held the lock beside the writer"
    wrote.release()
    read = late_reader.result(10)
    assert reader.token < wrote.token < read.token
    read.release()


def test_a_semaphore_of_three_with_four_claimants(api: Api, real_server: RealServer) -> None:
    name = unique("sem")
    permits = [
        api.acquire(real_server.address, name, lease=1, limit=3).result(10) for _ in range(3)
    ]
    for permit in permits:
        assert permit.lock.shared and permit.lock.limit == 3
    assert len({p.token for p in permits}) == 3
    with pytest.raises(errors.LockBusy):
        api.acquire(real_server.address, name, lease=1, limit=3, try_only=True).result(10)
    fourth = queued_claim(api, real_server, name, limit=3)
    assert still_waiting(fourth)
    permits[1].release()
    promoted = fourth.result(10)
    assert promoted.token > max(p.token for p in permits)
    for handle in [permits[0], permits[2], promoted]:
        handle.release()


@pytest.mark.parametrize("try_only", [False, True], ids=["acquire", "try"])
def test_a_limit_mismatch_is_refused(api: Api, real_server: RealServer, try_only: bool) -> None:
    name = unique("mismatch")
    holder = api.acquire(real_server.address, name, lease=1, limit=3).result(10)
    start = time.monotonic()
    with pytest.raises(errors.LimitMismatch) as info:
        api.acquire(real_server.address, name, lease=1, limit=2, try_only=try_only).result(10)
    assert time.monotonic() - start < 5  # terminal: not retried
    assert info.value.code == 0x1A and info.value.from_server and not info.value.temporary
    holder.release()


def test_sync_context_managers(real_server: RealServer) -> None:
    client = monolock.Client(real_server.address, lease=1)
    name = unique("with")
    with client.lock(name, shared=True) as a, client.lock(name, shared=True) as b:
        assert a.shared and b.shared and a.token < b.token
    with client.semaphore(unique("with-sem"), 2) as permit:
        assert permit.limit == 2
        assert permit.held
    assert permit.released
    with pytest.raises(errors.InvalidMode), client.semaphore(name, 0):
        pass


def test_async_context_managers(real_server: RealServer) -> None:
    async def main() -> None:
        client = AsyncClient(real_server.address, lease=1)
        name = unique("async-with")
        async with client.lock(name, shared=True) as a, client.lock(name, shared=True) as b:
            assert a.shared and b.shared and a.token < b.token
        async with client.semaphore(unique("async-sem"), 2) as permit:
            assert permit.limit == 2 and permit.held
        assert permit.released
        with pytest.raises(errors.InvalidMode):
            async with client.semaphore(name, 65536):
                pass

    asyncio.run(main())


def test_readme_shared_example_runs(
    real_server: RealServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's "Shared locks and semaphores" example, against the
    test server."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    section = readme.split("## Shared locks and semaphores", 1)[1].split("\n## ", 1)[0]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert "127.0.0.1:7117" in code
    exec(compile(code.replace("127.0.0.1:7117", real_server.address), "README.md", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert [line.split(" with")[0] for line in out] == [
        "reading",
        "writing",
        "holding one of 4 permits",
    ]
