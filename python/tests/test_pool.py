"""Session pools: the picking rule, then both pools against a scripted
server (room per session, a full pool, a dead session replaced)."""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass

import pytest

import monolock
from monolock import _mux_protocol as mp
from monolock import errors
from monolock._pool import pick
from monolock.aio import AsyncClient, AsyncSessionPool

from .session_support import SessionConn
from .support import Api, FakeServer, LockHandle


@dataclass
class Fake:
    alive: bool
    open_streams: int
    max_streams: int = 10
    ids_left: int = 1


def test_pick_the_most_room_among_the_live() -> None:
    a, b, dead = Fake(True, 5), Fake(True, 2), Fake(False, 0)
    assert pick([a, b, dead], 3) is b
    assert pick([Fake(True, 10), dead], 2) is None  # full, room in the pool: open one
    assert pick([], 1) is None
    with pytest.raises(errors.TooManyStreams) as info:
        pick([Fake(True, 10), Fake(True, 10)], 2)
    assert not info.value.from_server and info.value.temporary


def test_pick_passes_over_a_session_without_ids_left() -> None:
    spent = Fake(True, 1, ids_left=0)
    assert pick([spent], 1) is None  # it leaves the count: open a new one
    fresh = Fake(True, 5)
    assert pick([spent, fresh], 1) is fresh


@pytest.mark.parametrize("size", [0, -1, True, 1.5])
def test_pool_size_is_checked(size: object) -> None:
    with pytest.raises(errors.ConfigError):
        monolock.SessionPool(monolock.Client("127.0.0.1:1"), size)  # type: ignore[arg-type]


class PoolDriver:
    """A pool of either API on the fake server, driven from the test thread:
    each claim is granted by the fake end of the session it lands on."""

    def __init__(self, api: Api, fake_server: FakeServer, size: int, max_streams: int) -> None:
        self.api, self.fake_server, self.max_streams = api, fake_server, max_streams
        self.pool: monolock.SessionPool | AsyncSessionPool
        if api.kind == "asyncio":
            self.pool = AsyncSessionPool(AsyncClient(fake_server.address, lease=1), size=size)
        else:
            self.pool = monolock.SessionPool(
                monolock.Client(fake_server.address, lease=1), size=size
            )

    def acquire(self, name: str) -> object:
        pool = self.pool
        if isinstance(pool, AsyncSessionPool):
            return self.api.run_later(pool.acquire(name))
        return self.api.pool_call(lambda: pool.acquire(name))

    def claim(self, name: str, conn: SessionConn | None) -> tuple[object, SessionConn]:
        """Acquire name; conn is the session it goes to, None when the pool
        must open one for it."""
        fut = self.acquire(name)
        if conn is None:
            conn = SessionConn(self.fake_server.accept())
            conn.handshake(max_streams=self.max_streams)
        frame = conn.read_open()
        assert frame.name == name
        conn.grant(frame.stream, len(name))
        return fut.result(5), conn  # type: ignore[attr-defined]

    def close_later(self) -> concurrent.futures.Future[None]:
        pool = self.pool
        if isinstance(pool, AsyncSessionPool):
            return self.api.run_later(pool.close())
        return self.api.pool_call(pool.close)


def test_pool_fills_sessions_then_replaces_a_dead_one(api: Api, fake_server: FakeServer) -> None:
    driver = PoolDriver(api, fake_server, size=2, max_streams=1)
    pool, acquire, claim = driver.pool, driver.acquire, driver.claim

    first, conn_a = claim("a", None)
    _, conn_b = claim("bb", None)  # session A is full: a second session
    assert conn_b is not conn_a
    with pytest.raises(errors.TooManyStreams):
        acquire("ccc").result(5)  # type: ignore[attr-defined]
    conn_a.conn.close()  # session A dies: its claim is lost, told
    assert LockHandle(api, first).wait_lost(5)  # type: ignore[arg-type]
    _, conn_c = claim("dddd", None)  # replaced at the next claim
    assert conn_c is not conn_b
    assert len(pool.sessions) == 2
    close = driver.close_later()
    for conn in (conn_b, conn_c):
        conn.conn.wait_eof(5)
        conn.conn.close()
    close.result(5)


def test_pool_retires_a_session_without_ids_left(api: Api, fake_server: FakeServer) -> None:
    """A session that has used every stream id takes no new claim: the next
    claim opens a new session even in a pool of one, the old session's claim
    lives on, and the old session is closed once that claim is released."""
    driver = PoolDriver(api, fake_server, size=1, max_streams=100)
    pool, claim = driver.pool, driver.claim

    first, conn_a = claim("a", None)
    old = pool.sessions[0]
    old._core._next_id = mp.MAX_STREAM_ID + 1  # as if every id had been used
    assert old.ids_left == 0
    _, conn_b = claim("bb", None)  # a new session, in a pool of one
    assert conn_b is not conn_a
    assert old.alive and old.open_streams == 1  # its claim lives on

    release = api.pool_call(LockHandle(api, first).release)  # type: ignore[arg-type]
    frame = conn_a.read()
    assert frame.kind == mp.MSG_RELEASE
    conn_a.send(mp.encode_released(frame.stream))
    release.result(5)
    claim("ccc", conn_b)  # the pick closes the spent session
    conn_a.conn.wait_eof(5)
    assert old not in pool.sessions and len(pool.sessions) == 1
    close = driver.close_later()
    conn_b.conn.wait_eof(5)
    conn_b.conn.close()
    conn_a.conn.close()
    close.result(5)
