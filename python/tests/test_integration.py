"""Both clients against the real `monolock serve` binary."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any, cast

import pytest

import monolock
from monolock import errors
from monolock.aio import AsyncClient

from .support import Api, RealServer


def unique(prefix: str) -> str:
    return f"py/{prefix}/{uuid.uuid4().hex[:8]}"


def test_acquire_release_handoff(api: Api, real_server: RealServer) -> None:
    name = unique("handoff")
    holder = api.acquire(real_server.address, name, lease=1).result(10)
    waited = threading.Event()
    waiter = api.acquire(real_server.address, name, lease=1, on_waiting=lambda n: waited.set())
    assert waited.wait(10)
    assert not waiter.done()
    holder.release()
    second = waiter.result(10)
    assert second.token > holder.token
    second.release()


def test_fifo_order(api: Api, real_server: RealServer) -> None:
    name = unique("fifo")
    holder = api.acquire(real_server.address, name, lease=1).result(10)
    futures = []
    for _ in range(3):
        queued = threading.Event()
        futures.append(
            api.acquire(real_server.address, name, lease=1, on_waiting=lambda n, q=queued: q.set())
        )
        assert queued.wait(10)
    tokens = [holder.token]
    holder.release()
    for fut in futures:
        handle = fut.result(10)
        tokens.append(handle.token)
        assert all(not f.done() for f in futures[futures.index(fut) + 1 :])
        handle.release()
    assert tokens == sorted(tokens)


def test_try_acquire_busy(api: Api, real_server: RealServer) -> None:
    name = unique("busy")
    holder = api.acquire(real_server.address, name, lease=1).result(10)
    with pytest.raises(errors.LockBusy):
        api.acquire(real_server.address, name, lease=1, try_only=True).result(10)
    holder.release()
    free = api.acquire(real_server.address, name, lease=1, try_only=True).result(10)
    free.release()


def test_waiter_keeps_its_place_longer_than_the_lease(api: Api, real_server: RealServer) -> None:
    name = unique("patient")
    lease = 1.0
    holder = api.acquire(real_server.address, name, lease=lease).result(10)
    waits: list[str] = []
    waiter = api.acquire(real_server.address, name, lease=lease, on_waiting=waits.append)
    time.sleep(1.5 * lease)  # heartbeats keep both sessions alive
    assert not waiter.done()
    assert not holder.lock.lost.is_set(), holder.lock.lost_error
    holder.release()
    handle = waiter.result(10)
    # Queued once, never re-queued (a re-queue means an ack came later than
    # 0.8 x lease after its heartbeat).
    assert waits == [name], f"queued {len(waits)} times"
    handle.release()


def test_timeout_leaves_the_queue(api: Api, real_server: RealServer) -> None:
    name = unique("timeout")
    holder = api.acquire(real_server.address, name, lease=1).result(10)
    with pytest.raises(errors.AcquireTimeout):
        api.acquire(real_server.address, name, lease=1, timeout=0.3).result(10)
    waiter = api.acquire(real_server.address, name, lease=1)
    holder.release()
    waiter.result(10).release()


def test_validity_and_check(api: Api, real_server: RealServer) -> None:
    handle = api.acquire(real_server.address, unique("valid"), lease=2).result(10)
    lock = handle.lock
    assert 0 < lock.valid_until - time.monotonic() <= 1.6
    assert 0 < lock.remaining <= 1.6
    lock.check()
    assert lock.held and lock.lease == 2.0
    handle.release()
    assert lock.released and not lock.held and lock.remaining == 0
    with pytest.raises(errors.LockReleased):
        lock.check()
    assert not lock.lost.is_set()
    handle.release()  # idempotent


def test_tokens_increase(api: Api, real_server: RealServer) -> None:
    tokens = []
    for _ in range(3):
        handle = api.acquire(real_server.address, unique("token"), lease=1).result(10)
        tokens.append(handle.token)
        handle.release()
    assert tokens == sorted(set(tokens))


def test_shutdown_loses_the_lock(api: Api, fresh_server: RealServer) -> None:
    handle = api.acquire(fresh_server.address, unique("shutdown"), lease=5).result(10)
    fresh_server.terminate()
    assert handle.wait_lost(10)
    lost = handle.lock.lost_error
    assert lost is not None
    assert isinstance(lost.cause, errors.ShuttingDown)
    assert lost.code == 0x01 and lost.temporary


def test_sync_cancel_leaves_the_queue(real_server: RealServer) -> None:
    name = unique("cancel")
    client = monolock.Client(real_server.address, lease=1)
    holder = client.acquire(name)
    cancel = threading.Event()
    queued = threading.Event()
    outcome: list[BaseException] = []

    def wait() -> None:
        try:
            client.acquire(name, cancel=cancel, on_waiting=lambda n: queued.set())
        except BaseException as exc:
            outcome.append(exc)

    t = threading.Thread(target=wait)
    t.start()
    assert queued.wait(10)
    next_waiter_queued = threading.Event()
    result: list[monolock.Lock] = []
    t2 = threading.Thread(
        target=lambda: result.append(
            client.acquire(name, on_waiting=lambda n: next_waiter_queued.set())
        )
    )
    t2.start()
    assert next_waiter_queued.wait(10)
    cancel.set()
    t.join(5)
    assert len(outcome) == 1 and isinstance(outcome[0], errors.AcquireCancelled)
    holder.release()
    t2.join(10)
    assert result and result[0].token > holder.token
    result[0].release()


async def test_asyncio_cancel_leaves_the_queue(real_server: RealServer) -> None:
    name = unique("acancel")
    client = AsyncClient(real_server.address, lease=1)
    holder = await client.acquire(name)
    queued = asyncio.Event()
    task = asyncio.create_task(client.acquire(name, on_waiting=lambda n: queued.set()))
    await asyncio.wait_for(queued.wait(), 10)
    queued.clear()
    second = asyncio.create_task(client.acquire(name, on_waiting=lambda n: queued.set()))
    await asyncio.wait_for(queued.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await holder.release()
    lock = await asyncio.wait_for(second, 10)
    assert lock.token > holder.token
    await lock.release()


async def test_asyncio_context_managers(real_server: RealServer) -> None:
    name = unique("actx")
    async with AsyncClient(real_server.address, lease=1).lock(name) as lock:
        lock.check()
        with pytest.raises(errors.LockBusy):
            await AsyncClient(real_server.address).try_acquire(name)
    assert lock.released
    async with monolock.aio.lock(name, real_server.address, lease=1) as again:
        assert again.token > lock.token
        async with again:
            pass
    assert again.released


def test_sync_context_managers(real_server: RealServer) -> None:
    name = unique("ctx")
    with monolock.Client(real_server.address, lease=1).lock(name) as lock:
        lock.check()
        with pytest.raises(errors.LockBusy):
            monolock.Client(real_server.address).try_acquire(name)
    assert lock.released
    with monolock.lock(name, real_server.address, lease=1) as again, again:
        assert again.token > lock.token
    assert again.released


def test_lock_survives_a_cpu_bound_caller(real_server: RealServer) -> None:
    """The keeper thread keeps the lock while the caller's thread spins
    in pure Python for one and a half leases: the interpreter hands the GIL
    over every switch interval, so heartbeats go out on time."""
    name = unique("cpu")
    lease = 2.0
    lock = monolock.Client(real_server.address, lease=lease).acquire(name)
    start = time.monotonic()
    spin_until = start + 1.5 * lease
    n = 0
    while time.monotonic() < spin_until:
        n += 1
    assert n > 0
    lost = lock.lost_error
    assert lost is None, (
        f"lost {time.monotonic() - start:.3f} s into the spin: no heartbeat was acknowledged "
        f"for 0.8 x lease ({0.8 * lease:.1f} s) after the send at "
        f"{lock.valid_until - 0.8 * lease - start:+.3f} s: {lost}"
    )
    assert lock.valid_until > time.monotonic()
    # The server agrees: the lock is still taken.
    with pytest.raises(errors.LockBusy):
        monolock.Client(real_server.address).try_acquire(name)
    lock.release()


def test_the_admin_port_is_named_and_skipped(real_server: RealServer) -> None:
    """Pointed at the real admin port, every API and mode says that it does
    not speak monolock, quoting what it sent, and a list goes on to the next
    server. The admin port answers an ACQUIRE only at its 10 s header
    timeout, so the lease must keep the client timeout (0.8 x lease) longer;
    the four acquisitions run at once to wait for it only once."""
    admin, lease, limit = real_server.admin_address, 15, 30
    sync, asyncio_api = Api("sync"), Api("asyncio")
    try:
        alone = {
            (api.kind, mode): api.acquire(admin, unique("admin"), lease=lease, **kwargs)
            for api in (sync, asyncio_api)
            for mode, kwargs in (("wait", {"timeout": limit}), ("try", {"try_only": True}))
        }
        listed = [
            api.acquire([admin, real_server.address], unique("skip"), lease=lease, timeout=limit)
            for api in (sync, asyncio_api)
        ]
        for key, fut in alone.items():
            with pytest.raises(errors.NotMonolock) as info:
                fut.result(limit)
            assert str(info.value) == (
                f"monolock: {admin} does not speak the monolock protocol "
                '(it sent "HTTP/1.1 400…"); is this the admin port?'
            ), key
            assert not info.value.temporary, key  # spec/vectors/temporary.json
        for fut in listed:
            handle = fut.result(limit)
            assert handle.token > 0
            handle.release()
    finally:
        sync.close()
        asyncio_api.close()


# -- a value per claim (protocol version 3) ---------------------------------------


def listed_lock(real_server: RealServer, name: str) -> dict[str, Any]:
    """The admin API's listing of the lock ``name``."""
    url = f"http://{real_server.admin_address}/v1/locks"
    with urllib.request.urlopen(url, timeout=10) as resp:
        locks = json.load(resp)["locks"]
    found = [lock for lock in locks if lock["name"] == name]
    assert len(found) == 1, locks
    return cast("dict[str, Any]", found[0])


def test_a_claim_with_a_value_is_granted_and_listed(api: Api, real_server: RealServer) -> None:
    """The server grants a claim with a value and its admin listing shows
    the holder's value, as text, or as value_hex when it is not UTF-8."""
    name = unique("value")
    holder = api.acquire(real_server.address, name, lease=2, value="10.0.0.7:8080").result(10)
    assert holder.token > 0
    assert holder.lock.value == b"10.0.0.7:8080"
    listed = listed_lock(real_server, name)
    assert listed["holder"]["value"] == "10.0.0.7:8080"
    # A waiter's value is listed too.
    waited = threading.Event()
    waiter = api.acquire(
        real_server.address, name, lease=2, value=b"\x00\xff\x10", on_waiting=lambda n: waited.set()
    )
    assert waited.wait(10)
    [queued] = listed_lock(real_server, name)["waiters"]
    assert queued["value_hex"] == "00ff10" and "value" not in queued
    holder.release()
    second = waiter.result(10)
    assert second.token > holder.token
    assert listed_lock(real_server, name)["holder"]["value_hex"] == "00ff10"
    second.release()


def test_semaphore_permits_with_values(real_server: RealServer) -> None:
    """The lock helpers take a value too: two permits, each with its own."""
    name = unique("value-sem")
    client = monolock.Client(real_server.address, lease=2)
    with (
        client.semaphore(name, 2, value="gpu-1") as one,
        client.lock(name, limit=2, value='{"host":"gpu-2"}') as two,
    ):
        assert (one.value, two.value) == (b"gpu-1", b'{"host":"gpu-2"}')
        listed = listed_lock(real_server, name)
        assert [h["value"] for h in listed["holders"]] == ["gpu-1", '{"host":"gpu-2"}']
        with pytest.raises(errors.LockBusy):
            client.try_acquire(name, limit=2, value="gpu-3")


def test_a_value_too_long_is_refused_before_sending(real_server: RealServer) -> None:
    with pytest.raises(errors.ValueTooLong) as info:
        monolock.Client(real_server.address).acquire(unique("long"), value=b"v" * 1025)
    assert not info.value.from_server


def test_proclaim_replaces_the_listed_value(api: Api, real_server: RealServer) -> None:
    """Once proclaim returns, the server lists the new value, under the same
    token; a value too long and a released lock are refused."""
    name = unique("proclaim")
    holder = api.acquire(real_server.address, name, lease=2, value="10.0.0.7:8080").result(10)
    for value in ("10.0.0.7:9090", b"10.0.0.7:9191", "é"):
        holder.proclaim(value)
        listed = listed_lock(real_server, name)["holder"]
        want = value.encode() if isinstance(value, str) else value
        assert (listed["value"], listed["token"]) == (want.decode(), holder.token)
        assert holder.lock.value == want
    with pytest.raises(errors.ValueTooLong) as info:
        holder.proclaim(b"v" * 1025)
    assert not info.value.from_server
    holder.lock.check()  # refused before anything was sent
    assert listed_lock(real_server, name)["holder"]["value"] == "é"
    holder.release()
    with pytest.raises(errors.LockReleased):
        holder.proclaim("x")


def test_a_lock_claimed_without_a_value_cannot_proclaim(api: Api, real_server: RealServer) -> None:
    name = unique("plain")
    holder = api.acquire(real_server.address, name, lease=2).result(10)
    with pytest.raises(errors.MonolockError) as info:
        holder.proclaim("x")
    assert str(info.value) == (
        f"monolock: lock {name!r} was claimed without a value (use value= to proclaim)"
    )
    holder.lock.check()  # refused before anything was sent
    holder.release()


def test_readme_values_example_runs(
    real_server: RealServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's "Values" example, against the test server."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    section = readme.split("## Values: who holds the lock", 1)[1].split("\n## ", 1)[0]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert "127.0.0.1:7117" in code
    exec(compile(code.replace("127.0.0.1:7117", real_server.address), "README.md", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert [line.split(" with")[0] for line in out] == ["leading at b'10.0.0.7:8080'"]
