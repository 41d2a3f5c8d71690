"""The asyncio client: :class:`AsyncClient`, :class:`AsyncLock` and
:func:`lock`, with the shape of the blocking API.

Each claim is one connection served by an :class:`asyncio.Protocol` on the
running loop: frames are handled as they arrive and a loop timer sends the
heartbeats, so no task of yours has to run for the lock to stay held. The
loop itself must keep running: code that blocks the loop for longer than
0.8 x lease loses its locks (use the blocking client from threads for that).
A loss is told on the loop (the ``lost`` event and the callbacks) before the
transport is closed, which happens when the lock is released or the lease
has passed.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Generator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from typing import Callable, Protocol, TypeVar, cast

from ._aio_watch import AsyncObservations, AsyncWatch
from ._config import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_LEASE,
    DEFAULT_SERVER,
    Address,
    ClientConfig,
    Servers,
    check_timeout,
)
from ._connecting import connect_error
from ._failure import Failure
from ._lock import (
    BaseLock,
    ClaimState,
    ConnectionHandler,
    LostCallback,
    WaitingCallback,
    release_wait,
)
from ._mux_aio import AsyncSession, AsyncSessionWatch, SessionOpener, open_session
from ._plan import Attempt, Step, prepare_acquisition, timeout_error
from ._pool import AsyncSessionPool
from ._session import Session, SessionEvent
from ._watch import Observation
from .client import check_candidate_value
from .errors import MonolockError

__all__ = [
    "AsyncClient",
    "AsyncLock",
    "AsyncObservations",
    "AsyncSession",
    "AsyncSessionPool",
    "AsyncSessionWatch",
    "AsyncTerm",
    "AsyncWatch",
    "lock",
]

L = TypeVar("L")


class AsyncLockConn(Protocol):
    """What an asyncio lock asks of what carries it: its own connection,
    or its stream's session (:mod:`monolock._mux_aio`)."""

    async def release(self) -> None: ...
    def proclaim(self, value: bytes) -> int: ...
    async def proclaim_news(self) -> None: ...


class AsyncLock(BaseLock[asyncio.Event]):
    """A held lock of the asyncio client. Release it with ``await
    lock.release()`` or an ``async with`` block.

    Poll :attr:`held`, :attr:`is_lost` or :meth:`check`: they say lost from
    the :attr:`valid_until` instant on. ``lost`` is an :class:`asyncio.Event`
    set when the loss is told (``await lock.lost.wait()``), before the lost
    callbacks run and before the connection closes; :attr:`lost_error` says
    why. The lock is never re-acquired behind your back.
    """

    def __init__(self, conn: AsyncLockConn, session: ClaimState) -> None:
        super().__init__(session, asyncio.Event())
        self._conn = conn

    async def release(self) -> None:
        """Release the lock; same rules as :meth:`monolock.Lock.release`."""
        self._mark_released()
        await self._conn.release()

    async def proclaim(self, value: str | bytes) -> None:
        """Replace the lock's value and wait until the server has
        acknowledged it; same rules as :meth:`monolock.Lock.proclaim`.
        Cancelling the wait does not take the value back."""
        number = self._conn.proclaim(self._proclaim_value(value))
        while not self._proclaim_settled(number):
            await self._conn.proclaim_news()

    async def __aenter__(self) -> AsyncLock:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.release()


class AsyncTerm(AsyncLock):
    """One leadership of a name (:meth:`AsyncClient.campaign`); same rules
    as :class:`monolock.Term`."""

    async def resign(self) -> None:
        """End the term: the next candidate is elected at once."""
        await self.release()


class _AioConnection(ConnectionHandler[AsyncLock], asyncio.Protocol):
    """One connection as an asyncio protocol with a loop timer; every
    session input and output runs on the loop."""

    def __init__(
        self,
        session: Session,
        on_waiting: WaitingCallback | None,
        on_lost: LostCallback | None,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        super().__init__(session, on_waiting, on_lost)
        self._loop = loop
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._outcome: asyncio.Future[None] = loop.create_future()
        self._closed: asyncio.Future[None] = loop.create_future()
        self._proclaimers: list[asyncio.Future[None]] = []
        """Set when the callers waiting in ``proclaim`` must look again."""

    async def wait_outcome(self, deadline: float | None) -> AsyncLock | Failure:
        """Wait until granted or failed; close the connection on a timeout,
        a cancellation or a failure."""
        try:
            if deadline is None:
                await asyncio.shield(self._outcome)
            else:
                remaining = max(0.0, deadline - time.monotonic())
                await asyncio.wait_for(asyncio.shield(self._outcome), remaining)
        except asyncio.TimeoutError:
            self.close()
            return self.failure(timeout_error(self.session.name))
        except BaseException:
            self.close()  # a cancelled wait leaves the queue at once
            raise
        if self.lock is not None:
            return self.lock
        self.close()
        assert self.error is not None
        return self.failure(self.error)

    def close(self) -> None:
        """Let go: close the connection (a valid lock's with a half-close).
        Idempotent."""
        self.session.release()
        self._drive(self.session.tick(time.monotonic_ns()))

    def proclaim(self, value: bytes) -> int:
        """Hand in a new value (see :meth:`Session.proclaim`) and send it if
        nothing is in flight; returns its number, 0 when nothing goes."""
        number = self.session.proclaim(value)
        if number:
            self._drive(self.session.tick(time.monotonic_ns()))
        return number

    async def proclaim_news(self) -> None:
        """Wait until a PROCLAIM is acknowledged, or the lock is lost or
        closed (the loop timer tells a loss at the deadline)."""
        news = self._loop.create_future()
        self._proclaimers.append(news)
        await news

    async def release(self) -> None:
        """Let go, and wait (bounded) until the server has closed its end."""
        self.close()
        transport = self._transport
        if transport is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._closed), release_wait(self.session))
        except asyncio.TimeoutError:
            transport.abort()
            await asyncio.shield(self._closed)

    # -- asyncio.Protocol ----------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        if self.session.closed:  # given up while connecting
            self._transport.close()
            return
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with suppress(OSError):  # not TCP (a test transport)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._drive(self.session.start(time.monotonic_ns()))

    def data_received(self, data: bytes) -> None:
        self._drive(self.session.receive_data(data, time.monotonic_ns()))

    def eof_received(self) -> bool | None:
        # Tell the loss here, before the transport closes itself on return.
        self._drive(self.session.connection_lost(None))
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._closed.done():
            self._closed.set_result(None)
        self._drive(self.session.connection_lost(exc))

    # -- timer -------------------------------------------------------------

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timer(self) -> None:
        self._timer = None
        self._drive(self.session.tick(time.monotonic_ns()))

    def _drive(self, events: list[SessionEvent]) -> None:
        self._process(events)
        self._cancel_timer()
        wakeup = self.session.next_wakeup()
        if wakeup is not None:
            delay = max(0, wakeup - time.monotonic_ns()) / 1e9
            self._timer = self._loop.call_later(delay, self._on_timer)

    # -- ConnectionHandler -----------------------------------------------

    def _write(self, data: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    def _close_transport(self, handback: bool) -> None:
        # Reached only after the session has returned any Lost event, whose
        # callbacks have run by now: the loss is told before the close.
        self._cancel_timer()
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if handback and transport.can_write_eof():
            transport.write_eof()  # the server answers with its own close
        else:
            transport.close()  # TLS: close_notify, then the server closes

    def _outcome_known(self) -> None:
        if not self._outcome.done():
            self._outcome.set_result(None)

    def _make_lock(self) -> AsyncLock:
        return AsyncLock(self, self.session)

    def _wake_proclaimers(self) -> None:
        waiting, self._proclaimers = self._proclaimers, []
        for news in waiting:
            if not news.done():  # a cancelled wait
                news.set_result(None)


class _AioTermConnection(_AioConnection):
    """A candidate's connection, whose grant is an :class:`AsyncTerm`."""

    def _make_lock(self) -> AsyncLock:
        return AsyncTerm(self, self.session)


async def _open(
    loop: asyncio.AbstractEventLoop,
    conn: asyncio.Protocol,
    config: ClientConfig,
    address: Address,
    timeout: float | None,
) -> None:
    """Connect ``conn`` (and run the TLS handshake) within ``timeout``
    seconds: the twin of ``client._open_socket``."""
    tls = config.ssl_context
    handshake = False

    async def connect() -> None:
        nonlocal handshake
        if tls is None:
            await loop.create_connection(lambda: conn, address.host, address.port)
            return
        # TCP first, then TLS, so that a failure says which of them failed.
        raw, _ = await loop.create_connection(asyncio.Protocol, address.host, address.port)
        handshake = True
        try:
            transport = await loop.start_tls(
                raw, conn, tls, server_hostname=config.tls_hostname(address)
            )
        except BaseException:
            raw.close()
            raise
        if transport is None:  # closed while shaking hands
            raise ConnectionResetError("connection closed during the TLS handshake")
        conn.connection_made(transport)

    try:
        await asyncio.wait_for(connect(), timeout)
    except asyncio.TimeoutError:
        raise connect_error(address, TimeoutError("timed out"), handshake=handshake) from None
    except OSError as exc:
        raise connect_error(address, exc, handshake=handshake) from exc


async def _run_async(
    plan: Generator[Step, L | Failure | None, L],
    attempt: Callable[[Attempt], Awaitable[L | Failure]],
) -> L:
    """Drive a plan with awaited steps (the twin of ``_plan.run_sync``)."""
    result: L | Failure | None = None
    try:
        while True:
            try:
                step = plan.send(result)
            except StopIteration as stop:
                value: L = stop.value
                return value
            result = None
            if isinstance(step, Attempt):
                try:
                    result = await attempt(step)
                except MonolockError as exc:
                    result = Failure(exc)
            else:
                await asyncio.sleep(step.seconds)
    finally:
        plan.close()


class AsyncClient(ClientConfig):
    """An asyncio monolock client; arguments as for :class:`monolock.Client`.

    Cancelling a task blocked in :meth:`acquire` closes its connection at
    once, so the server drops its place in the queue.
    """

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
        """Wait until the lock ``name`` is granted and return it.

        Same rules as :meth:`monolock.Client.acquire`, shared claims,
        semaphores and values (``shared``, ``limit``, ``value``) included; cancel the task
        instead of passing ``cancel``.
        """
        return await self._acquire(
            name, shared, limit, value, timeout, on_waiting, on_lost, try_only=False
        )

    async def try_acquire(
        self,
        name: str | bytes,
        *,
        shared: bool = False,
        limit: int | None = None,
        value: str | bytes | None = None,
        on_lost: LostCallback | None = None,
    ) -> AsyncLock:
        """Take the lock ``name`` if it is free right now, else raise
        :class:`~monolock.errors.LockBusy`. ``shared``, ``limit`` and
        ``value`` as for :meth:`acquire`. One pass over the servers without sleeps or
        re-queues: the last error is raised."""
        return await self._acquire(name, shared, limit, value, None, None, on_lost, try_only=True)

    @asynccontextmanager
    async def lock(
        self,
        name: str | bytes,
        *,
        shared: bool = False,
        limit: int | None = None,
        value: str | bytes | None = None,
        timeout: float | None = None,
        on_waiting: WaitingCallback | None = None,
        on_lost: LostCallback | None = None,
    ) -> AsyncIterator[AsyncLock]:
        """``async with client.lock(name) as lock:`` acquires like
        :meth:`acquire` and releases when the block ends;
        ``client.lock(name, shared=True)`` holds it shared."""
        held = await self.acquire(
            name,
            shared=shared,
            limit=limit,
            value=value,
            timeout=timeout,
            on_waiting=on_waiting,
            on_lost=on_lost,
        )
        try:
            yield held
        finally:
            await held.release()

    def semaphore(
        self,
        name: str | bytes,
        limit: int,
        *,
        value: str | bytes | None = None,
        timeout: float | None = None,
        on_waiting: WaitingCallback | None = None,
        on_lost: LostCallback | None = None,
    ) -> AbstractAsyncContextManager[AsyncLock]:
        """``async with client.semaphore(name, 4) as permit:`` holds one of
        the 4 permits of the semaphore ``name`` for the block: the same as
        ``client.lock(name, limit=4)``."""
        return self.lock(
            name,
            limit=limit,
            value=value,
            timeout=timeout,
            on_waiting=on_waiting,
            on_lost=on_lost,
        )

    async def _acquire(
        self,
        name: str | bytes,
        shared: bool,
        limit: int | None,
        value: str | bytes | None,
        timeout: float | None,
        on_waiting: WaitingCallback | None,
        on_lost: LostCallback | None,
        *,
        try_only: bool,
        connection: type[_AioConnection] = _AioConnection,
    ) -> AsyncLock:
        plan: Generator[Step, AsyncLock | Failure | None, AsyncLock]
        claim, plan = prepare_acquisition(
            self, name, timeout, try_only=try_only, shared=shared, limit=limit, value=value
        )
        loop = asyncio.get_running_loop()

        async def attempt(step: Attempt) -> AsyncLock | Failure:
            session = claim.session(self.lease_ms, try_only=try_only, server=str(step.address))
            conn = connection(session, on_waiting, on_lost, loop)
            try:
                await _open(loop, conn, self, step.address, step.connect_timeout)
            except BaseException:
                conn.close()
                raise
            return await conn.wait_outcome(step.deadline)

        return await _run_async(plan, attempt)

    # -- sessions (protocol version 4) -----------------------------------------

    def session(self) -> SessionOpener:
        """Open a session: one connection that carries many claims, on the
        first server of the list that answers; ``async with
        client.session() as session:`` closes it at the end of the block,
        ``session = await client.session()`` leaves that to you. Same rules
        as :meth:`monolock.Client.session`."""

        async def open_one() -> AsyncSession:
            loop = asyncio.get_running_loop()
            last: MonolockError | None = None
            for address in self.servers:

                def connect(mux: asyncio.Protocol, address: Address = address) -> Awaitable[None]:
                    return _open(loop, mux, self, address, self.connect_timeout)

                try:
                    return await open_session(loop, connect, self.lease_ms, str(address))
                except MonolockError as exc:
                    last = exc
            assert last is not None
            raise last

        return SessionOpener(open_one)

    # -- leader election ----------------------------------------------------

    async def watch(self, name: str | bytes, *, timeout: float | None = None) -> AsyncWatch:
        """Follow the lock ``name``; same rules as
        :meth:`monolock.Client.watch`. The watch runs as a task of the
        running loop until you close it."""
        check_timeout(timeout)
        watch = AsyncWatch(self, name)
        try:
            await watch._wait_until_known(timeout)
        except BaseException:
            await watch.close()
            raise
        return watch

    async def campaign(
        self,
        name: str | bytes,
        value: str | bytes,
        *,
        timeout: float | None = None,
        on_waiting: WaitingCallback | None = None,
        on_lost: LostCallback | None = None,
    ) -> AsyncTerm:
        """Wait until elected leader of ``name`` with ``value``; same rules
        as :meth:`monolock.Client.campaign`."""
        check_candidate_value(name, value)
        term = await self._acquire(
            name, False, None, value, timeout, on_waiting, on_lost,
            try_only=False, connection=_AioTermConnection,
        )  # fmt: skip
        assert isinstance(term, AsyncTerm)
        return term

    async def observe(
        self, name: str | bytes, *, timeout: float | None = None
    ) -> AsyncObservations:
        """Follow the leadership of ``name``: ``async for`` an
        :class:`~monolock.Observation` per change; same rules as
        :meth:`monolock.Client.observe`."""
        return AsyncObservations(await self.watch(name, timeout=timeout))

    async def leader(self, name: str | bytes, *, timeout: float | None = None) -> Observation:
        """Who leads ``name`` now: one watch, its first picture, closed."""
        async with await self.watch(name, timeout=timeout) as watch:
            return watch.leader()


def lock(
    name: str | bytes,
    servers: Servers = DEFAULT_SERVER,
    *,
    shared: bool = False,
    limit: int | None = None,
    value: str | bytes | None = None,
    lease: float = DEFAULT_LEASE,
    timeout: float | None = None,
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
) -> AbstractAsyncContextManager[AsyncLock]:
    """One-liner: ``async with monolock.aio.lock("jobs/nightly") as lock:``
    holds the lock for the block. Arguments as for :class:`AsyncClient`."""
    client = AsyncClient(
        servers,
        lease=lease,
        connect_timeout=connect_timeout,
        ssl_context=ssl_context,
        server_hostname=server_hostname,
    )
    return client.lock(name, shared=shared, limit=limit, value=value, timeout=timeout)
