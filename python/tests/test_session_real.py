"""Sessions (protocol version 4) of both APIs against the real `monolock
serve`: pipelined claims, the same name twice, release acknowledged, one
claim kicked while the others live, a silent link told before the server
could regrant, semaphores, shared claims, values, busy, close."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
import uuid

import pytest

import monolock
from monolock import errors
from monolock.aio import AsyncClient

from .fencing_support import kick_holder
from .proxy_support import BlackholeProxy
from .session_support import SessionHandle, open_session
from .support import Api, LockHandle, RealServer

LEASE = 1.0
WAIT = 10.0


def unique(prefix: str) -> str:
    return f"py/session/{prefix}/{uuid.uuid4().hex[:8]}"


def session_of(api: Api, address: str, lease: float = LEASE) -> SessionHandle:
    return open_session(api, address, lease=lease).result(WAIT)


def single_try(address: str, name: str, **kw: object) -> monolock.Lock:
    """A single-claim try_acquire from another client."""
    return monolock.Client(address, lease=LEASE).try_acquire(name, **kw)  # type: ignore[arg-type]


def test_50_pipelined_acquires_async(real_server: RealServer) -> None:
    names = [unique(f"p{i}") for i in range(50)]

    async def scenario() -> list[int]:
        async with AsyncClient(real_server.address, lease=LEASE).session() as session:
            locks = await asyncio.wait_for(
                asyncio.gather(*(session.acquire(n) for n in names)), WAIT
            )
            assert all(lock.held for lock in locks)
            assert session.open_streams == 50
            tokens = [lock.token for lock in locks]
            await asyncio.gather(*(lock.release() for lock in locks))
            assert session.open_streams == 0
            return tokens

    tokens = asyncio.run(scenario())
    assert len(set(tokens)) == 50


def test_50_pipelined_acquires_sync(real_server: RealServer) -> None:
    names = [unique(f"s{i}") for i in range(50)]
    with monolock.Client(real_server.address, lease=LEASE).session() as session:
        with concurrent.futures.ThreadPoolExecutor(max_workers=50) as pool:
            locks = list(pool.map(session.acquire, names, timeout=WAIT))
            assert all(lock.held for lock in locks) and session.open_streams == 50
            assert len({lock.token for lock in locks}) == 50
            list(pool.map(lambda lock: lock.release(), locks))
        assert session.open_streams == 0


def test_same_name_twice_in_one_session(api: Api, real_server: RealServer) -> None:
    name = unique("twice")
    session = session_of(api, real_server.address)
    try:
        first = session.acquire(name).result(WAIT)
        second = session.acquire(name)
        time.sleep(0.3 * LEASE)
        assert not second.done(), "the second claim of the name was granted beside the first"
        first.release()
        held = second.result(WAIT)
        assert held.token > first.token and held.lock.held
        held.release()
    finally:
        session.close()


def test_release_is_acknowledged(api: Api, real_server: RealServer) -> None:
    name = unique("ack")
    session = session_of(api, real_server.address)
    try:
        handle = session.acquire(name).result(WAIT)
        handle.release()
        # Released on the server by the time release returned: at once.
        other = single_try(real_server.address, name)
        assert other.token > handle.token
        other.release()
    finally:
        session.close()


def test_on_waiting_runs_once_when_queued(api: Api, real_server: RealServer) -> None:
    """on_waiting(name) runs once when the server answers the OPEN with
    WAITING, before the grant is returned; never for a claim granted at once."""
    name = unique("waiting")
    calls: list[tuple[str, str]] = []
    session = session_of(api, real_server.address)
    try:
        first = session.acquire(name, on_waiting=lambda n: calls.append(("first", n))).result(WAIT)
        holder = first
        second = session.acquire(name, on_waiting=lambda n: calls.append(("second", n)))
        deadline = time.monotonic() + WAIT
        while not calls and time.monotonic() < deadline:
            time.sleep(0.01)
        assert calls == [("second", name)]
        assert not second.done()
        holder.release()
        granted = second.result(WAIT)
        assert granted.token > first.token
        assert calls == [("second", name)]
        granted.release()
    finally:
        session.close()


def test_close_while_holding_releases_everything(api: Api, real_server: RealServer) -> None:
    names = [unique("close-a"), unique("close-b")]
    session = session_of(api, real_server.address)
    handles = [session.acquire(n).result(WAIT) for n in names]
    session.close()
    for name in names:
        single_try(real_server.address, name).release()  # free at once
    for h in handles:
        assert h.lock.lost_error is None and not h.lock.lost.is_set()


def test_one_claim_kicked_while_the_others_live(api: Api, real_server: RealServer) -> None:
    kicked_name, kept_name = unique("kicked"), unique("kept")
    session = session_of(api, real_server.address)
    try:
        kicked = session.acquire(kicked_name).result(WAIT)
        kept = session.acquire(kept_name).result(WAIT)
        assert kick_holder(real_server.admin_address, kicked_name) == kicked.token
        assert kicked.wait_lost(WAIT)
        loss = kicked.lock.lost_error
        assert loss is not None and isinstance(loss.cause, errors.AdminClosed)
        time.sleep(1.5 * LEASE)  # past a deadline: heartbeats keep the rest
        assert kept.lock.held and session.session.alive
        with pytest.raises(errors.LockBusy):
            single_try(real_server.address, kept_name)
        kept.release()
    finally:
        session.close()


def test_a_silent_link_is_told_before_the_server_regrants(
    api: Api, real_server: RealServer
) -> None:
    name = unique("silent")
    proxy = BlackholeProxy(real_server.address)
    session = session_of(api, proxy.address)
    waiter_api = Api("sync")
    try:
        held = session.acquire(name).result(WAIT)
        told: list[float] = []
        held.lock.add_lost_callback(lambda e: told.append(time.monotonic()))
        queued = threading.Event()
        waiter = waiter_api.acquire(
            real_server.address, name, lease=LEASE, on_waiting=lambda n: queued.set()
        )
        assert queued.wait(WAIT)
        proxy.cut()
        other = waiter.result(10 * LEASE + WAIT)
        granted_at = time.monotonic()
        assert held.lock.is_lost
        assert told and told[0] < granted_at, "the server regranted before the loss was told"
        assert held.lock.valid_until <= granted_at
        assert other.token > held.token
        other.release()
    finally:
        waiter_api.close()
        session.close()
        proxy.close()


def test_semaphore_and_shared_claims_in_a_session(api: Api, real_server: RealServer) -> None:
    sem, shared = unique("sem"), unique("shared")
    session = session_of(api, real_server.address)
    try:
        permits = [session.acquire(sem, limit=2).result(WAIT) for _ in range(2)]
        assert all(p.lock.limit == 2 for p in permits)
        with pytest.raises(errors.LockBusy):
            session.acquire(sem, limit=2, try_only=True).result(WAIT)
        with pytest.raises(errors.LimitMismatch):
            session.acquire(sem, limit=3).result(WAIT)
        assert session.session.alive  # a refusal ends its stream only
        readers = [session.acquire(shared, shared=True).result(WAIT) for _ in range(2)]
        single = single_try(real_server.address, shared, shared=True)  # shares with them
        with pytest.raises(errors.LockBusy):
            single_try(real_server.address, shared)  # an exclusive one does not
        single.release()
        for h in [*permits, *readers]:
            h.release()
    finally:
        session.close()


def test_value_and_proclaim_in_a_session(api: Api, real_server: RealServer) -> None:
    name = unique("value")
    session = session_of(api, real_server.address)
    try:
        handle = session.acquire(name, value="10.0.0.7:80").result(WAIT)
        observer = monolock.Client(real_server.address, lease=LEASE)
        seen = observer.leader(name, timeout=WAIT)
        assert (seen.token, seen.value) == (handle.token, b"10.0.0.7:80")
        handle.proclaim("10.0.0.8:80")
        assert handle.lock.value == b"10.0.0.8:80"
        seen = observer.leader(name, timeout=WAIT)
        assert (seen.token, seen.value) == (handle.token, b"10.0.0.8:80")
        handle.release()
    finally:
        session.close()


def test_try_acquire_busy_in_a_session(api: Api, real_server: RealServer) -> None:
    name = unique("busy")
    holder = single_try(real_server.address, name)
    session = session_of(api, real_server.address)
    try:
        with pytest.raises(errors.LockBusy):
            session.acquire(name, try_only=True).result(WAIT)
        holder.release()
        # The busy claim left the queue: the name is free, and this
        # session can take it.
        got: LockHandle = session.acquire(name, try_only=True).result(WAIT)
        got.release()
    finally:
        session.close()


def test_watch_and_campaign_in_a_session(real_server: RealServer) -> None:
    name = unique("elect")
    with monolock.Client(real_server.address, lease=LEASE).session() as session:
        watch = session.watch(name, timeout=WAIT)
        assert watch.leader().state is monolock.LeaderState.NO_LEADER
        term = session.campaign(name, "10.0.0.9:80", timeout=WAIT)
        assert isinstance(term, monolock.Term)
        deadline = time.monotonic() + WAIT
        while watch.leader().token != term.token:
            assert watch.wait_changed(deadline - time.monotonic())
        assert watch.leader().value == b"10.0.0.9:80"
        time.sleep(1.2 * LEASE)  # past the WATCHING's 0.8 x lease: the ALIVEs vouch
        assert watch.state().known and watch.leader().token == term.token
        term.resign()
        while watch.leader().state is not monolock.LeaderState.NO_LEADER:
            assert watch.wait_changed(deadline - time.monotonic())
        watch.close()


def test_async_watch_in_a_session(real_server: RealServer) -> None:
    name = unique("awatch")

    async def scenario() -> None:
        client = AsyncClient(real_server.address, lease=LEASE)
        async with client.session() as session:
            watch = await session.watch(name, timeout=WAIT)
            term = await client.campaign(name, "a:1")  # a single claim, seen in the session
            while watch.leader().token != term.token:
                assert await watch.wait_changed(WAIT)
            await asyncio.sleep(1.2 * LEASE)
            assert watch.state().known
            await term.resign()
            watch.close()

    asyncio.run(scenario())
