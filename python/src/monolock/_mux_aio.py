"""The asyncio client's session (protocol version 4): :class:`AsyncSession`,
many claims over one connection, served by an :class:`asyncio.Protocol`
and a loop timer through the sans-IO core (:mod:`monolock._mux`), as
:mod:`monolock.aio` serves a single claim.

Losses are told from a loop callback scheduled by the reader, never inside
it, and the close that follows them is scheduled after them, so every
loss is told before the transport closes.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Generator
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING, Any, Callable, cast

from ._config import check_timeout
from ._lock import LostCallback, WaitingCallback, release_wait
from ._log import logger
from ._mux import Changed, ClaimStream, Lost, MuxCore, MuxEvent, SessionView, Stream, WatchStream
from ._plan import check_mode, timeout_error
from ._protocol import encode_name, encode_value
from ._session import Close, Send
from ._watch import LockState, Observation, leader_of, next_transition, watch_timeout
from .errors import ConnectionClosed, LockLost, MonolockError, unprefixed

if TYPE_CHECKING:
    from .aio import AsyncLock, AsyncTerm


class _AioMux(asyncio.Protocol):
    """One session's connection on the loop."""

    def __init__(self, core: MuxCore, loop: asyncio.AbstractEventLoop) -> None:
        self.core = core
        self._loop = loop
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._news: list[asyncio.Future[None]] = []
        self.closed: asyncio.Future[None] = loop.create_future()

    async def news(self, deadline: float | None = None) -> None:
        """Wait until the session moves on (or the monotonic ``deadline``)."""
        fut = self._loop.create_future()
        self._news.append(fut)
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        # asyncio.wait, not wait_for: it never swallows a cancellation.
        await asyncio.wait({fut}, timeout=timeout)

    def kick(self) -> None:
        """Send what the application handed in."""
        self._drive(self.core.tick(time.monotonic_ns()))

    # -- asyncio.Protocol ------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._drive(self.core.start(time.monotonic_ns()))

    def data_received(self, data: bytes) -> None:
        self._drive(self.core.receive_data(data, time.monotonic_ns()))

    def eof_received(self) -> bool:
        closing = self.core.closed  # our half-close, answered by the server's
        self._drive(self.core.connection_lost(None))
        if closing and self._transport is not None:
            self._transport.close()
        return True  # else the close is ours, after the losses are told

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)
        self._drive(self.core.connection_lost(exc))

    # -- driving ---------------------------------------------------------------

    def _on_timer(self) -> None:
        self._timer = None
        self._drive(self.core.tick(time.monotonic_ns()))

    def _drive(self, events: list[MuxEvent]) -> None:
        for event in events:
            if isinstance(event, Send):
                if self._transport is not None and not self._transport.is_closing():
                    self._transport.write(event.data)
            elif isinstance(event, Changed):
                self._grant(self.core.streams.get(event.stream))
            elif isinstance(event, Lost):
                self._grant(event.stream)
                self._loop.call_soon(_tell, event.stream, event.error)
            elif isinstance(event, Close):
                # After the tellings scheduled before it: told first.
                self._loop.call_soon(self._close_transport, event.handback)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        wakeup = self.core.next_wakeup()
        if wakeup is not None:
            delay = max(0, wakeup - time.monotonic_ns()) / 1e9
            self._timer = self._loop.call_later(delay, self._on_timer)
        news, self._news = self._news, []
        for fut in news:
            if not fut.done():
                fut.set_result(None)

    def _grant(self, stream: Stream | None) -> None:
        if not isinstance(stream, ClaimStream) or stream.token is None or stream.lock is not None:
            return
        from .aio import AsyncLock, AsyncTerm  # aio imports this module

        kind = AsyncTerm if stream.term else AsyncLock
        lock = kind(_AioStreamConn(self, stream), stream)
        if stream.on_lost is not None:
            lock.add_lost_callback(stream.on_lost)
        stream.lock = lock

    def _close_transport(self, handback: bool) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if handback and transport.can_write_eof():
            transport.write_eof()  # the server answers with its own close
            self._loop.call_later(
                min(self.core.schedule.client_timeout_ms / 1000, 1.0), transport.abort
            )
        else:
            transport.close()


def _tell(stream: ClaimStream, error: LockLost) -> None:
    lock: AsyncLock = stream.lock
    lock._tell_lost(error)
    logger.info("%s", unprefixed(error))


class _AioStreamConn:
    """What a stream's :class:`~monolock.aio.AsyncLock` asks of its session."""

    def __init__(self, mux: _AioMux, stream: ClaimStream) -> None:
        self._mux = mux
        self._stream = stream

    async def release(self) -> None:
        stream, core = self._stream, self._mux.core
        self._mux.kick()
        deadline = time.monotonic() + release_wait(stream)
        while not (stream.released_acked or core.closed) and time.monotonic() < deadline:
            await self._mux.news(deadline)

    def proclaim(self, value: bytes) -> int:
        number = self._mux.core.proclaim(self._stream, value)
        if number:
            self._mux.kick()
        return number

    async def proclaim_news(self) -> None:
        await self._mux.news()


class AsyncSessionWatch:
    """A watch of one lock name on an asyncio session
    (:meth:`AsyncSession.watch`); as :class:`monolock.SessionWatch`."""

    def __init__(self, mux: _AioMux, stream: WatchStream) -> None:
        self._mux = mux
        self._stream = stream
        self._seen = stream.version
        self.name = stream.name
        """The watched name."""

    def state(self) -> LockState:
        """The current picture; ``known`` is decided at the call."""
        return self._stream.state(time.monotonic_ns())

    def leader(self) -> Observation:
        """The picture read as an election: the first holder leads."""
        return leader_of(self.state(), time.monotonic())

    async def wait_changed(self, timeout: float | None = None) -> bool:
        """Wait until the picture changes, stops being vouched for, or the
        watch ends, after the last call; False when ``timeout`` passed first."""
        stream = self._stream
        deadline = None if timeout is None else time.monotonic() + timeout
        while stream.version == self._seen:
            if deadline is not None and time.monotonic() >= deadline:
                return False
            await self._mux.news(deadline)
        self._seen = stream.version
        return True

    @property
    def done(self) -> bool:
        """Whether the watch has ended (closed, or :attr:`error`)."""
        return self._stream.closed

    @property
    def error(self) -> MonolockError | None:
        """Why the watch ended (``None`` while it runs, and after :meth:`close`)."""
        return self._stream.error

    async def observations(self) -> AsyncIterator[Observation]:
        """Yield the leadership whenever it changes, the first as it is
        now, until the watch ends; then raise its :attr:`error`, if any."""
        last: Observation | None = None
        stream = self._stream
        while True:
            version = stream.version
            state = stream.state(time.monotonic_ns())
            now = time.monotonic()
            observation = leader_of(state, now)
            if observation != last:
                last = observation
                yield observation
                continue
            if stream.closed:
                if stream.error is not None:
                    raise stream.error
                return
            deadline = time.monotonic() + next_transition(state, observation, now)
            while stream.version == version and time.monotonic() < deadline:
                await self._mux.news(deadline)

    def close(self) -> None:
        """Release the watch's stream. Idempotent."""
        self._mux.core.release_watch(self._stream)
        self._mux.kick()

    async def __aenter__(self) -> AsyncSessionWatch:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()


class AsyncSession(SessionView):
    """Many claims over one connection (protocol version 4), from
    :meth:`monolock.aio.AsyncClient.session`; the same rules as
    :class:`monolock.Session`, with awaits. Cancelling a task waiting in
    :meth:`acquire` leaves the queue (a RELEASE of its stream)."""

    def __init__(self, mux: _AioMux) -> None:
        self._mux = mux
        self._core = mux.core

    async def acquire(
        self,
        name: str | bytes,
        *,
        shared: bool = False,
        limit: int | None = None,
        value: str | bytes | None = None,
        timeout: float | None = None,
        on_waiting: WaitingCallback | None = None,
        on_lost: LostCallback | None = None,
    ) -> AsyncLock:
        """Claim ``name`` on this session and wait until it is granted; as
        :meth:`monolock.Session.acquire` (cancel the task instead of
        ``cancel``)."""
        return await self._acquire(
            name, shared, limit, value, timeout, on_lost, False, on_waiting=on_waiting
        )

    async def campaign(
        self,
        name: str | bytes,
        value: str | bytes,
        *,
        timeout: float | None = None,
        on_waiting: WaitingCallback | None = None,
        on_lost: LostCallback | None = None,
    ) -> AsyncTerm:
        """Wait until elected leader of ``name`` on this session; as
        :meth:`monolock.Session.campaign`."""
        from .aio import AsyncTerm
        from .client import check_candidate_value

        check_candidate_value(name, value)
        term = await self._acquire(
            name, False, None, value, timeout, on_lost, False, term=True, on_waiting=on_waiting
        )
        assert isinstance(term, AsyncTerm)
        return term

    async def watch(self, name: str | bytes, *, timeout: float | None = None) -> AsyncSessionWatch:
        """Follow the lock ``name`` on this session; as
        :meth:`monolock.Session.watch`."""
        raw = encode_name(name)
        timeout = check_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        stream = self._core.open_watch(raw)
        self._mux.kick()
        try:
            while not (stream.vouched or stream.closed):
                if deadline is not None and time.monotonic() >= deadline:
                    raise watch_timeout(stream.name, None)
                await self._mux.news(deadline)
        except BaseException:
            self._core.release_watch(stream)
            self._mux.kick()
            raise
        if stream.error is not None:
            raise stream.error
        return AsyncSessionWatch(self._mux, stream)

    async def observe(
        self, name: str | bytes, *, timeout: float | None = None
    ) -> AsyncIterator[Observation]:
        """Follow the leadership of ``name`` on this session; as
        :meth:`monolock.Session.observe` (``async for``)."""
        watch = await self.watch(name, timeout=timeout)
        try:
            async for observation in watch.observations():
                yield observation
        finally:
            watch.close()

    async def try_acquire(
        self,
        name: str | bytes,
        *,
        shared: bool = False,
        limit: int | None = None,
        value: str | bytes | None = None,
        on_lost: LostCallback | None = None,
    ) -> AsyncLock:
        """Take ``name`` on this session if it is free right now, else raise
        :class:`~monolock.errors.LockBusy`."""
        return await self._acquire(name, shared, limit, value, None, on_lost, True)

    @asynccontextmanager
    async def lock(
        self,
        name: str | bytes,
        *,
        shared: bool = False,
        limit: int | None = None,
        value: str | bytes | None = None,
        timeout: float | None = None,
        on_lost: LostCallback | None = None,
    ) -> AsyncIterator[AsyncLock]:
        """``async with session.lock(name) as lock:`` acquires and releases."""
        held = await self.acquire(
            name, shared=shared, limit=limit, value=value, timeout=timeout, on_lost=on_lost
        )
        try:
            yield held
        finally:
            await held.release()

    async def close(self) -> None:
        """Release every claim and close; as :meth:`monolock.Session.close`."""
        self._core.close()
        self._mux.kick()
        if self._mux._transport is not None:
            await asyncio.shield(self._mux.closed)

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        state = "alive" if self._core.ready else "closed"
        return (
            f"<AsyncSession {self.server} {state} streams={self.open_streams}/{self.max_streams}>"
        )

    async def _acquire(
        self,
        name: str | bytes,
        shared: bool,
        limit: int | None,
        value: str | bytes | None,
        timeout: float | None,
        on_lost: LostCallback | None,
        try_only: bool,
        *,
        term: bool = False,
        on_waiting: WaitingCallback | None = None,
    ) -> AsyncLock:
        shared, limit_n = check_mode(shared, limit)
        raw = encode_name(name)
        raw_value = encode_value(value)
        timeout = check_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        stream = self._core.open(
            raw, shared=shared, limit=limit_n, value=raw_value, try_only=try_only,
            on_lost=on_lost, term=term,
        )  # fmt: skip
        self._mux.kick()
        told = on_waiting is None
        try:
            while True:
                if stream.queued and not told:
                    told = True
                    assert on_waiting is not None
                    on_waiting(stream.name)  # before the grant is returned
                if stream.lock is not None or (stream.settled and stream.token is None):
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    raise timeout_error(stream.name)
                await self._mux.news(deadline)
        except BaseException:
            stream.release()  # leave the queue (a lock granted meanwhile too)
            self._mux.kick()
            raise
        if stream.lock is not None:
            lock: AsyncLock = stream.lock
            return lock
        if stream.error is not None:
            raise stream.error
        raise ConnectionClosed("monolock: the session has ended")


class SessionOpener:
    """What :meth:`monolock.aio.AsyncClient.session` returns: await it for
    an :class:`AsyncSession`, or use it in ``async with``, which closes the
    session at the end of the block."""

    def __init__(self, open_one: Callable[[], Any]) -> None:
        self._open_one = open_one
        self._session: AsyncSession | None = None

    def __await__(self) -> Generator[Any, None, AsyncSession]:
        session: AsyncSession = yield from self._open_one().__await__()
        return session

    async def __aenter__(self) -> AsyncSession:
        self._session = await self._open_one()
        return self._session

    async def __aexit__(self, *exc_info: object) -> None:
        if self._session is not None:
            await self._session.close()


async def open_session(
    loop: asyncio.AbstractEventLoop,
    connect: Callable[[_AioMux], Any],
    lease_ms: int,
    server: str,
) -> AsyncSession:
    """Connect (``connect(protocol)``), send SESSION and wait for
    SESSION_OK (at most 0.8 x lease: the core's deadline)."""
    core = MuxCore(lease_ms, server=server)
    mux = _AioMux(core, loop)
    await connect(mux)
    while not (core.ready or core.closed or core.error is not None):
        await mux.news()
    if not core.ready:
        # No claim was made: nothing to hold the connection open for (a
        # session that timed out would keep it until its lease's end).
        core.close()
        mux.kick()
        assert core.error is not None
        raise core.error
    return AsyncSession(mux)
