"""Test helpers for sessions (protocol version 4): a facade that drives the
sync and asyncio sessions the same way, and a scripted session server end
that reads the client's frames one by one."""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import time
from dataclasses import dataclass
from typing import Any

import monolock
from monolock import _mux_protocol as mp
from monolock import _protocol as proto
from monolock.aio import AsyncClient, AsyncSession

from .support import Api, FakeConn, LockHandle


class SessionHandle:
    """A session of either API, used from the test thread."""

    def __init__(self, api: Api, session: monolock.Session | AsyncSession) -> None:
        self.api = api
        self.session = session

    def acquire(self, name: str, **kwargs: Any) -> concurrent.futures.Future[LockHandle]:
        """Start an acquisition (``try_only=True`` for try_acquire)."""
        try_only = kwargs.pop("try_only", False)
        session = self.session
        if isinstance(session, AsyncSession):

            async def go() -> LockHandle:
                if try_only:
                    return LockHandle(self.api, await session.try_acquire(name, **kwargs))
                return LockHandle(self.api, await session.acquire(name, **kwargs))

            return self.api.run_later(go())
        sync = session

        def run() -> LockHandle:
            if try_only:
                return LockHandle(self.api, sync.try_acquire(name, **kwargs))
            return LockHandle(self.api, sync.acquire(name, **kwargs))

        return self.api.pool_call(run)

    def close(self) -> None:
        if isinstance(self.session, AsyncSession):
            self.api.run(self.session.close())
        else:
            self.session.close()

    def close_later(self) -> concurrent.futures.Future[None]:
        if isinstance(self.session, AsyncSession):
            return self.api.run_later(self.session.close())
        return self.api.pool_call(self.session.close)


def open_session(
    api: Api, servers: Any, **client_kw: Any
) -> concurrent.futures.Future[SessionHandle]:
    """Start opening a session of ``api``'s kind."""
    if api.kind == "asyncio":

        async def go() -> SessionHandle:
            return SessionHandle(api, await AsyncClient(servers, **client_kw).session())

        return api.run_later(go())
    return api.pool_call(
        lambda: SessionHandle(api, monolock.Client(servers, **client_kw).session())
    )


@dataclass(frozen=True)
class ClientFrame:
    """One frame the client sent."""

    kind: int
    stream: int = 0
    body: bytes = b""
    """The whole inner frame of an OPEN or ON; the lease of a SESSION."""

    @property
    def name(self) -> str:
        """The lock name of an OPEN."""
        inner = self.body
        offset = 8 if inner[1] == 1 else 11
        length = int.from_bytes(inner[offset - 2 : offset], "big")
        return inner[offset : offset + length].decode("utf-8")


class SessionConn:
    """The server end of one session, driven by the test. Heartbeats are
    answered ALIVE while :attr:`alive` is true."""

    def __init__(self, conn: FakeConn) -> None:
        self.conn = conn
        self.alive = True
        self.heartbeats = 0

    def handshake(self, max_streams: int = 100) -> int:
        """Read SESSION, answer SESSION_OK; the lease_ms."""
        head = self.conn.read_exact(6)
        assert head[:2] == bytes([mp.MSG_SESSION, mp.VERSION]), head
        self.conn.send(mp.encode_session_ok(max_streams))
        return int.from_bytes(head[2:], "big")

    def read(self, timeout: float = 5.0) -> ClientFrame:
        """The next frame other than a HEARTBEAT."""
        while True:
            kind = self.conn.read_exact(1, timeout)[0]
            if kind == proto.MSG_HEARTBEAT:
                self.heartbeats += 1
                if self.alive:
                    self.conn.send(mp.ALIVE_FRAME)
                continue
            stream = int.from_bytes(self.conn.read_exact(4, timeout), "big")
            if kind == mp.MSG_RELEASE:
                return ClientFrame(kind, stream)
            if kind == mp.MSG_ON:
                head = self.conn.read_exact(3, timeout)
                value = self.conn.read_exact(int.from_bytes(head[1:], "big"), timeout)
                return ClientFrame(kind, stream, head + value)
            assert kind == mp.MSG_OPEN, hex(kind)
            head = self.conn.read_exact(2, timeout)
            assert head[0] == proto.MSG_ACQUIRE, head
            rest = self.conn.read_exact(4 + (2 if head[1] == 1 else 5), timeout)
            name = self.conn.read_exact(int.from_bytes(rest[-2:], "big"), timeout)
            body = head + rest + name
            if head[1] == 3:
                length = self.conn.read_exact(2, timeout)
                body += length + self.conn.read_exact(int.from_bytes(length, "big"), timeout)
            return ClientFrame(kind, stream, body)

    def pump(self, seconds: float, *, until_close: bool = False) -> None:
        """For ``seconds``, answer heartbeats (while :attr:`alive`) and fail
        on any other byte, and on the client's close unless ``until_close``."""
        deadline = time.monotonic() + seconds
        sock = self.conn.sock
        assert not self.conn.buf, self.conn.buf
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            try:
                data = sock.recv(4096)
            except socket.timeout:
                return
            if not data and until_close:
                return
            assert data, "the client closed the session"
            assert set(data) == {proto.MSG_HEARTBEAT}, data
            self.heartbeats += len(data)
            if self.alive:
                self.conn.send(mp.ALIVE_FRAME * len(data))

    def read_open(self) -> ClientFrame:
        frame = self.read()
        assert frame.kind == mp.MSG_OPEN, frame
        return frame

    def grant(self, stream: int, token: int) -> None:
        self.conn.send(mp.encode_stream(stream, proto.encode_acquired(token)))

    def waiting(self, stream: int) -> None:
        self.conn.send(mp.encode_stream(stream, bytes([proto.MSG_WAITING])))

    def send(self, data: bytes) -> None:
        self.conn.send(data)


def run_in(api: Api, coro_or_fn: Any) -> Any:
    """Run a coroutine on the loop (asyncio) or call a function (sync)."""
    if asyncio.iscoroutine(coro_or_fn):
        return api.run(coro_or_fn)
    return coro_or_fn()
