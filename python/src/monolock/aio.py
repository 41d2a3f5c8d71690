"""The asyncio client: :class:`AsyncClient`, :class:`AsyncLock` and
:func:`lock`, with the shape of the blocking API.

Each claim is one connection served by an :class:`asyncio.Protocol` on the
running loop: frames are handled as they arrive and a loop timer sends the
heartbeats, so no task of yours has to run for the lock to stay held. The
loop itself must keep running: code that blocks the loop for longer than
0.8 x lease loses its locks (use the blocking client from threads for that).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Generator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from typing import Callable, TypeVar, cast

from ._config import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_LEASE,
    DEFAULT_SERVER,
    ClientConfig,
    Servers,
)
from ._lock import BaseLock, ConnectionHandler, LostCallback, WaitingCallback, release_wait
from ._plan import Attempt, Step, connect_error, prepare_acquisition
from ._session import Session, SessionEvent
from .errors import AcquireTimeout, MonolockError

__all__ = ["AsyncClient", "AsyncLock", "lock"]

L = TypeVar("L")


class AsyncLock(BaseLock[asyncio.Event]):
    """A held lock of the asyncio client. Release it with ``await
    lock.release()`` or an ``async with`` block.

    ``lost`` is an :class:`asyncio.Event` set when the lock is lost
    (``await lock.lost.wait()``); :attr:`lost_error` says why. The lock is
    never re-acquired behind your back.
    """

    def __init__(
        self, conn: _AioConnection, name: str, token: int, lease_ms: int, valid_until: float
    ) -> None:
        super().__init__(name, token, lease_ms, valid_until, asyncio.Event())
        self._conn = conn

    async def release(self) -> None:
        """Release the lock; same rules as :meth:`monolock.Lock.release`."""
        self._mark_released()
        await self._conn.close_confirmed()

    async def __aenter__(self) -> AsyncLock:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.release()


class _AioConnection(ConnectionHandler[AsyncLock], asyncio.Protocol):
    """One connection as an asyncio protocol with a loop timer."""

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
        self._closed_by_owner = False
        self._outcome: asyncio.Future[None] = loop.create_future()
        self._closed: asyncio.Future[None] = loop.create_future()

    async def wait_outcome(self, deadline: float | None) -> AsyncLock:
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
            raise AcquireTimeout() from None
        except BaseException:
            self.close()  # a cancelled wait leaves the queue at once
            raise
        if self.lock is not None:
            return self.lock
        self.close()
        assert self.error is not None
        raise self.error

    def close(self) -> None:
        """Close the connection. Idempotent."""
        self._closed_by_owner = True
        self.session.close()
        self._close_transport()

    async def close_confirmed(self) -> None:
        """Close, and wait (bounded) until the server has closed its end too."""
        transport = self._transport
        if transport is None or not self.session.held or transport.is_closing():
            self.close()
        else:
            self._closed_by_owner = True
            self.session.close()
            self._cancel_timer()
            if transport.can_write_eof():
                transport.write_eof()  # the server answers with its own close
            else:
                transport.close()  # TLS: close_notify, then the server closes
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
        if self._closed_by_owner:
            self._transport.close()
            return
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with suppress(OSError):  # not TCP (a test transport)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.session.start(time.monotonic())
        self._drive([])

    def data_received(self, data: bytes) -> None:
        self._drive(self.session.receive_data(data, time.monotonic()))

    def eof_received(self) -> bool | None:
        return None  # let the transport close; connection_lost follows

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
        self._drive(self.session.tick(time.monotonic()))

    def _drive(self, events: list[SessionEvent]) -> None:
        self._process(events)
        self._cancel_timer()
        wakeup = self.session.next_wakeup()
        if wakeup is not None:
            delay = max(0.0, wakeup - time.monotonic())
            self._timer = self._loop.call_later(delay, self._on_timer)

    # -- ConnectionHandler -----------------------------------------------

    def _write(self, data: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    def _close_transport(self) -> None:
        self._cancel_timer()
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()

    def _outcome_known(self) -> None:
        if not self._outcome.done():
            self._outcome.set_result(None)

    def _make_lock(self, token: int, valid_until: float) -> AsyncLock:
        return AsyncLock(
            self, self.session.name, token, self.session.schedule.lease_ms, valid_until
        )


async def _run_async(
    plan: Generator[Step, L | None, L],
    attempt: Callable[[Attempt], Awaitable[L]],
) -> L:
    """Drive a plan with awaited steps (the twin of ``_plan.run_sync``)."""
    result: L | None = None
    error: MonolockError | None = None
    try:
        while True:
            try:
                step = plan.throw(error) if error is not None else plan.send(result)
            except StopIteration as stop:
                value: L = stop.value
                return value
            result, error = None, None
            try:
                if isinstance(step, Attempt):
                    result = await attempt(step)
                else:
                    await asyncio.sleep(step.seconds)
            except MonolockError as exc:
                error = exc
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
        timeout: float | None = None,
        on_waiting: WaitingCallback | None = None,
        on_lost: LostCallback | None = None,
    ) -> AsyncLock:
        """Wait until the lock ``name`` is granted and return it.

        Same rules as :meth:`monolock.Client.acquire`; cancel the task
        instead of passing ``cancel``.
        """
        return await self._acquire(name, timeout, on_waiting, on_lost, try_only=False)

    async def try_acquire(
        self,
        name: str | bytes,
        *,
        on_lost: LostCallback | None = None,
    ) -> AsyncLock:
        """Take the lock ``name`` if it is free right now, else raise
        :class:`~monolock.errors.LockBusy`. No retries: any error is raised."""
        return await self._acquire(name, None, None, on_lost, try_only=True)

    @asynccontextmanager
    async def lock(
        self,
        name: str | bytes,
        *,
        timeout: float | None = None,
        on_waiting: WaitingCallback | None = None,
        on_lost: LostCallback | None = None,
    ) -> AsyncIterator[AsyncLock]:
        """``async with client.lock(name) as lock:`` acquires like
        :meth:`acquire` and releases when the block ends."""
        held = await self.acquire(name, timeout=timeout, on_waiting=on_waiting, on_lost=on_lost)
        try:
            yield held
        finally:
            await held.release()

    async def _acquire(
        self,
        name: str | bytes,
        timeout: float | None,
        on_waiting: WaitingCallback | None,
        on_lost: LostCallback | None,
        *,
        try_only: bool,
    ) -> AsyncLock:
        plan: Generator[Step, AsyncLock | None, AsyncLock]
        raw, plan = prepare_acquisition(self, name, timeout, try_only=try_only)
        loop = asyncio.get_running_loop()

        async def attempt(step: Attempt) -> AsyncLock:
            session = Session(raw, self.lease_ms, try_only=try_only)
            conn = _AioConnection(session, on_waiting, on_lost, loop)
            address = step.address
            tls = self.ssl_context
            try:
                await asyncio.wait_for(
                    loop.create_connection(
                        lambda: conn,
                        address.host,
                        address.port,
                        ssl=tls,
                        server_hostname=self.tls_hostname(address),
                    ),
                    step.connect_timeout,
                )
            except asyncio.TimeoutError:
                conn.close()
                raise connect_error(address, TimeoutError("timed out")) from None
            except OSError as exc:
                conn.close()
                raise connect_error(address, exc) from exc
            except BaseException:
                conn.close()
                raise
            return await conn.wait_outcome(step.deadline)

        return await _run_async(plan, attempt)


def lock(
    name: str | bytes,
    servers: Servers = DEFAULT_SERVER,
    *,
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
    return client.lock(name, timeout=timeout)
