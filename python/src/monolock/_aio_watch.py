"""The asyncio client's watch: :class:`AsyncWatch` and
:class:`AsyncObservations`, the twins of :mod:`monolock._sync_watch`. A
task on the running loop runs the watch's connections one after the other;
the rules are the core's (:mod:`monolock._watch`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator, Awaitable
from typing import NoReturn

from . import _protocol as proto
from ._config import Address, ClientConfig
from ._connecting import connect_error
from ._log import logger
from ._watch import (
    LockState,
    Observation,
    WatchCore,
    WatchLink,
    WatchRetry,
    ended_error,
    leader_of,
    next_transition,
    watch_timeout,
)
from .errors import ConnectionClosed, MonolockError, unprefixed

_RECV_SIZE = 65536


class AsyncWatch:
    """A watch of the asyncio client (:meth:`monolock.aio.AsyncClient.watch`);
    same rules as :class:`monolock.Watch`. Close it with ``await
    watch.close()`` or an ``async with`` block."""

    def __init__(self, config: ClientConfig, name: str | bytes) -> None:
        self._raw = proto.encode_name(name)
        self.name = self._raw.decode("utf-8")
        """The watched name."""
        self._config = config
        self._core = WatchCore(config.lease_ms)
        self._news = asyncio.Event()
        """Set, then replaced, at every change told."""
        self._version = 0
        self._seen = 0
        self._error: MonolockError | None = None
        self._last_error: MonolockError | None = None
        self._task = asyncio.get_running_loop().create_task(self._run())

    def state(self) -> LockState:
        """The current picture; ``known`` is decided at the call."""
        return self._core.state(time.monotonic_ns())

    def leader(self) -> Observation:
        """The picture read as an election: the first holder leads."""
        return leader_of(self.state(), time.monotonic())

    async def wait_changed(self, timeout: float | None = None) -> bool:
        """As :meth:`monolock.Watch.wait_changed`."""
        changed = await self._wait_version(self._seen, timeout)
        self._seen = self._version
        return changed

    @property
    def done(self) -> bool:
        """Whether the watch has ended: :meth:`close`, or :attr:`error`."""
        return self._task.done()

    @property
    def error(self) -> MonolockError | None:
        """Why the watch ended (``None`` while it runs, and after :meth:`close`)."""
        return self._error

    async def observations(self) -> AsyncGenerator[Observation, None]:
        """As :meth:`monolock.Watch.observations`."""
        last: Observation | None = None
        while True:
            version, state, now = self._version, self.state(), time.monotonic()
            observation = leader_of(state, now)
            if observation != last:
                last = observation
                yield observation
                continue  # look again: the state may have moved meanwhile
            if self.done:
                if self._error is not None:
                    raise self._error
                return
            await self._wait_version(version, next_transition(state, observation, now))

    async def close(self) -> None:
        """End the watch and its connection. Idempotent."""
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    async def __aenter__(self) -> AsyncWatch:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<AsyncWatch {json.dumps(self.name, ensure_ascii=False)} {self.leader().state}>"

    async def _wait_until_known(self, timeout: float | None) -> None:
        """Return once the first picture is vouched for; raise the error
        that ended the watch first, or :class:`WatchTimeout`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._core.known(time.monotonic_ns()):
            if self.done:
                raise self._error or ConnectionClosed("monolock: watch closed")
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                await self.close()
                raise watch_timeout(self.name, self._last_error)
            await self._wait_version(self._version, left)

    async def _wait_version(self, version: int, timeout: float | None) -> bool:
        """Wait until a change after ``version`` is told; False on timeout."""
        if self._version == version and not self.done:
            return await _within(self._news.wait(), timeout)
        return True

    def _signal(self) -> None:
        self._version += 1
        news, self._news = self._news, asyncio.Event()
        news.set()

    # -- the watch's task ----------------------------------------------------------

    async def _run(self) -> None:
        retry = WatchRetry(self._config.servers)
        try:
            while True:
                address = retry.next_address()
                error, vouched = await self._connect(address)
                self._core.disconnected()
                self._last_error = error
                self._signal()
                try:
                    delay = retry.after(error, vouched)
                except MonolockError as exc:
                    self._error = exc
                    return
                logger.debug(
                    "watch %r: connection to %s ended, reconnecting in %.3f s: %s",
                    self.name, address, delay, unprefixed(error),
                )  # fmt: skip
                await asyncio.sleep(delay)
        finally:
            self._core.disconnected()
            self._signal()

    async def _open(self, address: Address) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        config = self._config
        try:
            return await asyncio.wait_for(
                asyncio.open_connection(
                    address.host,
                    address.port,
                    ssl=config.ssl_context,
                    server_hostname=config.tls_hostname(address),
                ),
                config.connect_timeout,
            )
        except asyncio.TimeoutError:
            raise connect_error(address, TimeoutError("timed out")) from None
        except OSError as exc:
            raise connect_error(address, exc, handshake=config.ssl_context is not None) from exc

    async def _connect(self, address: Address) -> tuple[MonolockError, bool]:
        """Run one connection until it fails: why it ended, and whether the
        server answered a request on it."""
        try:
            reader, writer = await self._open(address)
        except MonolockError as exc:
            return exc, False
        link = WatchLink(self._core, self._raw, self._config.lease_ms)
        try:
            await self._serve(reader, writer, link)
        except (MonolockError, OSError) as exc:
            return ended_error(exc), link.vouched
        finally:
            writer.close()

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: WatchLink
    ) -> NoReturn:
        writer.write(link.start(time.monotonic_ns()))
        while True:
            out, changed = link.tick(time.monotonic_ns())
            if changed:
                self._signal()
            if out:
                writer.write(out)
                continue
            wait = max(0, link.next_wakeup() - time.monotonic_ns()) / 1e9
            read = asyncio.ensure_future(reader.read(_RECV_SIZE))
            if not await _within(read, wait):
                continue
            data = read.result()
            if not data:
                raise ConnectionClosed("monolock: watch connection closed by the server")
            if link.receive(data, time.monotonic_ns()):
                self._signal()


class AsyncObservations:
    """The leadership of a name, one :class:`Observation` per change
    (:meth:`monolock.aio.AsyncClient.observe`): an async iterator over its
    own watch, which :meth:`aclose` (or the end of an ``async with`` block)
    ends."""

    def __init__(self, watch: AsyncWatch) -> None:
        self.watch = watch
        self._iterator = watch.observations()
        self._waiting = False
        """Whether a task waits in the iteration (which the watch's end ends)."""

    def __aiter__(self) -> AsyncObservations:
        return self

    async def __anext__(self) -> Observation:
        self._waiting = True
        try:
            return await self._iterator.__anext__()
        finally:
            self._waiting = False

    async def aclose(self) -> None:
        """End the watch: an iteration waiting in another task ends too."""
        await self.watch.close()
        if not self._waiting:
            await self._iterator.aclose()

    async def __aenter__(self) -> AsyncObservations:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


async def _within(awaitable: Awaitable[object], timeout: float | None) -> bool:
    """Wait for ``awaitable`` at most ``timeout`` seconds (None: no limit)
    and report whether it finished; it is cancelled if it did not. Not
    ``asyncio.wait_for``: before Python 3.12 it can swallow a cancellation
    of the waiting task that comes as the awaitable finishes, and a watch
    that is closed then would run on, its ``close`` waiting forever."""
    task = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    finally:
        if not task.done():
            task.cancel()
    if task in done:
        task.result()  # its exception, if any
        return True
    return False
