"""The blocking client's watch: :class:`Watch` and :class:`Observations`.

Each watch has a daemon thread of its own that runs its connections one
after the other (the keeper serves claims, whose connections end with
them; a watch outlives its connections, reconnects and sleeps between
them). The rules are the core's (:mod:`monolock._watch`); the thread only
moves bytes and time through it, under the watch's mutex, which
:meth:`Watch.state` takes too.
"""

from __future__ import annotations

import json
import select
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import suppress
from typing import Callable

from . import _protocol as proto
from ._config import Address, ClientConfig
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

OpenSocket = Callable[[ClientConfig, Address, "float | None"], socket.socket]


class Watch:
    """Follows one lock name (protocol version 3): its holders with their
    values, its queue, and every change, in the server's order. It
    reconnects by itself, resuming where it left off, and follows the
    active server of an HA cell. Made by :meth:`monolock.Client.watch`;
    close it with :meth:`close` or a ``with`` block.

    Its state is vouched for only until the send of its last acknowledged
    heartbeat plus 0.8 x lease, as a lock's is: after that, and whenever it
    is between connections, :meth:`state` says ``known=False``, and
    :meth:`leader` says unknown, never the last holder it saw.
    """

    def __init__(self, config: ClientConfig, name: str | bytes, open_socket: OpenSocket) -> None:
        self._raw = proto.encode_name(name)
        self.name = self._raw.decode("utf-8")
        """The watched name."""
        self._config = config
        self._open_socket = open_socket
        self._core = WatchCore(config.lease_ms)
        self._mutex = threading.Lock()
        self._news = threading.Condition(self._mutex)
        self._version = 0
        """Counts the changes told (see :meth:`wait_changed`)."""
        self._seen = 0
        self._error: MonolockError | None = None
        self._last_error: MonolockError | None = None
        self._done = False
        self._stopping = False
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._thread = threading.Thread(
            target=self._run, name=f"monolock watch {self.name}", daemon=True
        )
        self._thread.start()

    # -- the application's side ----------------------------------------------

    def state(self) -> LockState:
        """The current picture; ``known`` is decided at the call."""
        with self._mutex:
            return self._core.state(time.monotonic_ns())

    def leader(self) -> Observation:
        """The picture read as an election: the first holder leads."""
        return leader_of(self.state(), time.monotonic())

    def wait_changed(self, timeout: float | None = None) -> bool:
        """Wait until the picture changes, or stops being vouched for, or
        the watch ends, after the last call (or the start); False when
        ``timeout`` seconds passed first. A signal, not a queue: read
        :meth:`state` after it."""
        with self._mutex:
            changed = self._news.wait_for(lambda: self._version != self._seen, timeout)
            self._seen = self._version
            return changed

    @property
    def done(self) -> bool:
        """Whether the watch has ended: :meth:`close`, or :attr:`error`."""
        return self._done

    @property
    def error(self) -> MonolockError | None:
        """Why the watch ended (``None`` while it runs, and after :meth:`close`)."""
        return self._error

    def observations(self) -> Iterator[Observation]:
        """Yield the leadership whenever it changes (a new leader, a new
        value, no leader, a hold, unknown), the first as it is now, until
        the watch ends; then raise its :attr:`error`, if any. Each is the
        state at that moment: a slow reader misses nothing that still holds."""
        last: Observation | None = None
        while True:
            with self._mutex:
                version = self._version
                state = self._core.state(time.monotonic_ns())
                done = self._done
            now = time.monotonic()
            observation = leader_of(state, now)
            if observation != last:
                last = observation
                yield observation
                continue  # look again: the state may have moved meanwhile
            if done:
                if self._error is not None:
                    raise self._error
                return
            self._wait_version(version, next_transition(state, observation, now))

    def close(self) -> None:
        """End the watch and its connection; returns once they are gone.
        Idempotent."""
        with self._mutex:
            self._stopping = True
        with suppress(OSError):  # closed already: the thread has ended
            self._wake_writer.send(b"\0")
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Watch {json.dumps(self.name, ensure_ascii=False)} {self.leader().state}>"

    def _wait_until_known(self, timeout: float | None) -> None:
        """Return once the first picture is vouched for; raise the error
        that ended the watch first, or :class:`WatchTimeout`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._mutex:
            while not self._core.known(time.monotonic_ns()):
                if self._done:
                    raise self._error or ConnectionClosed("monolock: watch closed")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._news.wait(left)
            else:
                return
        self.close()
        raise watch_timeout(self.name, self._last_error)

    def _wait_version(self, version: int, timeout: float) -> None:
        with self._mutex:
            self._news.wait_for(lambda: self._version != version or self._done, timeout)

    # -- the watch's thread ---------------------------------------------------

    def _signal(self) -> None:
        """Tell the waiters of a change (the mutex is held)."""
        self._version += 1
        self._news.notify_all()

    def _run(self) -> None:
        retry = WatchRetry(self._config.servers)
        try:
            while not self._stopping:
                address = retry.next_address()
                error, vouched = self._connect(address)
                with self._mutex:
                    self._core.disconnected()
                    self._last_error = error
                    self._signal()
                if self._stopping:
                    return
                try:
                    delay = retry.after(error, vouched)
                except MonolockError as exc:
                    self._error = exc
                    return
                logger.debug(
                    "watch %r: connection to %s ended, reconnecting in %.3f s: %s",
                    self.name, address, delay, unprefixed(error),
                )  # fmt: skip
                if self._sleep(delay):
                    return
        finally:
            with self._mutex:
                self._done = True
                self._signal()
            self._wake_reader.close()
            self._wake_writer.close()

    def _sleep(self, seconds: float) -> bool:
        """Sleep, or less if the watch is closed meanwhile: whether it was."""
        select.select([self._wake_reader], [], [], seconds)
        return self._stopping

    def _connect(self, address: Address) -> tuple[MonolockError, bool]:
        """Run one connection until it fails or the watch is closed: why it
        ended, and whether the server answered a request on it."""
        try:
            sock = self._open_socket(self._config, address, self._config.connect_timeout)
        except MonolockError as exc:
            return exc, False
        link = WatchLink(self._core, self._raw, self._config.lease_ms)
        try:
            self._serve(sock, link)
            return ConnectionClosed("monolock: watch closed"), link.vouched
        except (MonolockError, OSError) as exc:
            return ended_error(exc), link.vouched
        finally:
            sock.close()

    def _serve(self, sock: socket.socket, link: WatchLink) -> None:
        sock.settimeout(link.core.timeout_ns / 1e9)  # bounds a send; reads wait in select
        with self._mutex:
            frame = link.start(time.monotonic_ns())
        sock.sendall(frame)
        while not self._stopping:
            with self._mutex:
                out, changed = link.tick(time.monotonic_ns())
                if changed:
                    self._signal()
                wake_at = link.next_wakeup()
            if out:
                sock.sendall(out)
                continue
            if not self._readable(sock, wake_at):
                continue
            data = sock.recv(_RECV_SIZE)
            if not data:
                raise ConnectionClosed("monolock: watch connection closed by the server")
            with self._mutex:
                if link.receive(data, time.monotonic_ns()):
                    self._signal()

    def _readable(self, sock: socket.socket, wake_at: int) -> bool:
        """Wait until ``sock`` has bytes, the watch is closed or ``wake_at``."""
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return True  # decrypted bytes select() cannot see
        wait = max(0, wake_at - time.monotonic_ns()) / 1e9
        ready, _, _ = select.select([sock, self._wake_reader], [], [], wait)
        return sock in ready and not self._stopping


class Observations:
    """The leadership of a name, one :class:`Observation` per change
    (:meth:`monolock.Client.observe`): an iterator over its own watch,
    which :meth:`close` (or the end of a ``with`` block) ends."""

    def __init__(self, watch: Watch) -> None:
        self.watch = watch
        self._iterator = watch.observations()

    def __iter__(self) -> Observations:
        return self

    def __next__(self) -> Observation:
        return next(self._iterator)

    def close(self) -> None:
        """End the watch: an iteration waiting in another thread ends too."""
        self.watch.close()

    def __enter__(self) -> Observations:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
