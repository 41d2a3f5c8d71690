"""The blocking client: :class:`Client`, :class:`Lock` and :func:`lock`.

Each lock claim owns one connection and one daemon thread. The thread reads
the server's frames, sends heartbeats and watches the validity deadline, so
a held lock stays held while the caller's thread is busy, and its loss is
told on time even then: first the ``lost`` event and the callbacks, while
the connection stays open; the thread closes it when the lock is released
or the lease has passed.
"""

from __future__ import annotations

import selectors
import socket
import ssl
import threading
import time
from collections.abc import Generator, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress

from ._config import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_LEASE,
    DEFAULT_SERVER,
    Address,
    ClientConfig,
    Servers,
)
from ._lock import BaseLock, ConnectionHandler, LostCallback, WaitingCallback, release_wait
from ._plan import (
    Attempt,
    Failure,
    Step,
    connect_error,
    logger,
    prepare_acquisition,
    run_sync,
    timeout_error,
)
from ._session import Session, SessionEvent
from .errors import AcquireCancelled, ConnectionClosed

__all__ = ["Client", "Lock", "lock"]

_RECV_SIZE = 4096
# Granularity at which a blocked acquire notices its ``cancel`` event;
# only used when one is given.
_CANCEL_POLL = 0.01
# Longest single wait of a connection thread; long leases wake it up early.
_MAX_SELECT = 3600.0


class Lock(BaseLock[threading.Event]):
    """A held lock. Returned by :meth:`Client.acquire`; release it with
    :meth:`release` or a ``with`` block.

    Poll :attr:`held`, :attr:`is_lost` or :meth:`check`: they say lost from
    the :attr:`valid_until` instant on. ``lost`` is a
    :class:`threading.Event` set when the loss is told (``lock.lost.wait()``),
    and :attr:`lost_error` says why. After a loss the connection stays open,
    without heartbeats, until you release the lock or the lease has passed
    since the last acknowledged heartbeat, so the server cannot hand the
    lock on while you are still being told. The lock is never re-acquired
    behind your back.
    """

    def __init__(self, conn: _ThreadConnection, session: Session) -> None:
        super().__init__(session, threading.Event())
        self._conn = conn

    def release(self) -> None:
        """Release the lock by closing its connection; the server hands it to
        the next waiter at once. A valid lock's release returns once the
        server has closed its end too (at most ``min(0.8 x lease, 1 s)``), so
        the lock is free on the server by then; after a loss it closes at
        once. Idempotent."""
        self._mark_released()
        self._conn.close()

    def __enter__(self) -> Lock:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


class _ThreadConnection(ConnectionHandler[Lock]):
    """One connection, served by its own daemon thread, which runs every
    session input and carries out every output."""

    def __init__(
        self,
        sock: socket.socket,
        session: Session,
        on_waiting: WaitingCallback | None,
        on_lost: LostCallback | None,
    ) -> None:
        super().__init__(session, on_waiting, on_lost)
        self._sock = sock
        self._changed = threading.Condition()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._out = bytearray()
        self._want_write = False
        self._thread = threading.Thread(
            target=self._run, name=f"monolock {session.name}", daemon=True
        )

    # -- called by the caller's thread ----------------------------------

    def start(self) -> None:
        self._thread.start()

    def wait_outcome(
        self, deadline: float | None, cancel: threading.Event | None
    ) -> Lock | Failure:
        """Block until granted or failed; close the connection on a timeout,
        a cancel or a failure."""
        try:
            with self._changed:
                while not self.outcome_known:
                    now = time.monotonic()
                    if cancel is not None and cancel.is_set():
                        break
                    if deadline is not None and now >= deadline:
                        break
                    wait = None if deadline is None else deadline - now
                    if cancel is not None:
                        wait = _CANCEL_POLL if wait is None else min(wait, _CANCEL_POLL)
                    self._changed.wait(wait)
                lock, error = self.lock, self.error
        except BaseException:  # KeyboardInterrupt: leave the queue too
            self.close()
            raise
        if lock is not None:
            return lock
        self.close()
        if error is None:
            cancelled = cancel is not None and cancel.is_set()
            error = AcquireCancelled() if cancelled else timeout_error(self.session.name)
        return self.failure(error)

    def close(self) -> None:
        """Let go: the thread closes the connection (after the server's
        close, bounded, if the lock was valid) and ends. Returns once it
        has, unless called on that thread (from a callback). Idempotent."""
        self.session.release()
        with suppress(OSError):  # the thread may be gone already
            self._wake_w.send(b"x")
        if threading.current_thread() is not self._thread and self._thread.is_alive():
            self._thread.join()

    # -- the connection's thread -----------------------------------------

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        try:
            sel.register(self._wake_r, selectors.EVENT_READ)
            sel.register(self._sock, selectors.EVENT_READ)
            self._drive(self.session.start(time.monotonic_ns()))
            while not self.session.closed:
                self._step(sel)
        except Exception as exc:  # a bug here must still end the claim visibly
            logger.exception("connection thread of lock %r failed", self.session.name)
            self._drive(self.session.connection_lost(exc))
        finally:
            sel.close()
            self._close_transport(handback=False)
            self._wake_r.close()
            self._wake_w.close()
            with self._changed:
                if not self.outcome_known:
                    self.error = ConnectionClosed("monolock: connection ended")
                self._changed.notify_all()

    def _step(self, sel: selectors.BaseSelector) -> None:
        wakeup = self.session.next_wakeup()
        timeout = None if wakeup is None else max(0, wakeup - time.monotonic_ns()) / 1e9
        if timeout is not None:
            timeout = min(timeout, _MAX_SELECT)  # epoll refuses huge timeouts
        want_write = bool(self._out)
        if want_write != self._want_write:
            mask = selectors.EVENT_READ | (selectors.EVENT_WRITE if want_write else 0)
            sel.modify(self._sock, mask)
            self._want_write = want_write
        events: list[SessionEvent] = []
        for key, mask in sel.select(timeout):
            if key.fileobj is self._wake_r:
                with suppress(OSError):
                    self._wake_r.recv(64)  # only here to interrupt select()
                continue
            if mask & selectors.EVENT_WRITE:
                events += self._flush()
            if mask & selectors.EVENT_READ and not self.session.closed:
                events += self._read()
        events += self.session.tick(time.monotonic_ns())
        self._drive(events)

    def _hand_back(self) -> None:
        """Half-close, then read until the server closes or time is up."""
        try:
            # socket.socket's own shutdown: SSLSocket's would drop the TLS
            # state that is still needed to read the server's close.
            socket.socket.shutdown(self._sock, socket.SHUT_WR)
        except OSError:
            return
        deadline = time.monotonic() + release_wait(self.session)
        with selectors.DefaultSelector() as sel:
            sel.register(self._sock, selectors.EVENT_READ)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not sel.select(remaining):
                    return
                try:
                    if not self._sock.recv(_RECV_SIZE):
                        return
                except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    continue
                except OSError:
                    return

    def _drive(self, events: list[SessionEvent]) -> None:
        """Carry out session events, then push out what is queued."""
        self._process(events)
        if self._out and not self.session.closed:
            self._process(self._flush())

    def _read(self) -> list[SessionEvent]:
        chunks: list[bytes] = []
        ended = False
        cause: OSError | None = None
        try:
            while True:
                data = self._sock.recv(_RECV_SIZE)
                if not data:
                    ended = True
                    break
                chunks.append(data)
                # TLS may hold decrypted bytes that select() cannot see.
                if isinstance(self._sock, ssl.SSLSocket) and self._sock.pending():
                    continue
                if len(data) < _RECV_SIZE:
                    break
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            pass
        except OSError as exc:
            ended, cause = True, exc
        events: list[SessionEvent] = []
        if chunks:
            events += self.session.receive_data(b"".join(chunks), time.monotonic_ns())
        if ended:
            events += self.session.connection_lost(cause)
        return events

    def _flush(self) -> list[SessionEvent]:
        try:
            while self._out:
                sent = self._sock.send(self._out)
                del self._out[:sent]
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            pass
        except OSError as exc:
            return self.session.connection_lost(exc)
        return []

    # -- ConnectionHandler -----------------------------------------------

    def _write(self, data: bytes) -> None:
        self._out += data  # _drive flushes once the events are handled

    def _close_transport(self, handback: bool) -> None:
        self._out.clear()
        if handback and self._sock.fileno() != -1:
            self._hand_back()
        with suppress(OSError):
            self._sock.close()

    def _outcome_known(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def _make_lock(self) -> Lock:
        return Lock(self, self.session)


def _open_socket(config: ClientConfig, address: Address, timeout: float | None) -> socket.socket:
    """Connect (and run the TLS handshake) within ``timeout`` seconds."""
    try:
        sock = socket.create_connection((address.host, address.port), timeout=timeout)
    except OSError as exc:
        raise connect_error(address, exc) from exc
    tls = config.ssl_context
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            sock = tls.wrap_socket(sock, server_hostname=config.tls_hostname(address))
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise connect_error(address, exc, handshake=tls is not None) from exc
    return sock


class Client(ClientConfig):
    """A blocking monolock client.

    ``servers`` is one address (``"host:port"``, ``"[::1]:7117"``, a bare
    host for port 7117, ``(host, port)``) or a list tried in order; an
    address that cannot be parsed raises
    :class:`~monolock.errors.ConfigError` here. ``lease`` (seconds, a whole
    number of milliseconds from 0.001 to 4294967.295) sets how fast the
    server notices a dead holder; heartbeats go out every quarter lease and
    a lock counts as lost 0.8 x lease after the last acknowledged one. Any
    other lease raises :class:`~monolock.errors.InvalidLease` here; it is
    never rounded. ``connect_timeout`` bounds each connection attempt. Pass
    an :class:`ssl.SSLContext` for TLS; the certificate is checked against
    ``server_hostname`` or the address's host. The client holds no
    connection itself: each claim has its own, so one client may be shared
    by threads. Acquisitions log on the ``monolock`` logger: retries at
    WARNING, progress at DEBUG.
    """

    def acquire(
        self,
        name: str | bytes,
        *,
        timeout: float | None = None,
        cancel: threading.Event | None = None,
        on_waiting: WaitingCallback | None = None,
        on_lost: LostCallback | None = None,
    ) -> Lock:
        """Block until the lock ``name`` is granted and return it.

        ``timeout`` (seconds, ``None``: no limit) bounds the whole wait,
        re-queues included: :class:`~monolock.errors.AcquireTimeout`. Setting
        ``cancel`` gives up (:class:`~monolock.errors.AcquireCancelled`) and
        leaves the queue at once. ``on_waiting(name)`` runs each time the
        server queues the claim, ``on_lost(error)`` if the lock is later lost.
        Temporary errors and broken connections while waiting lead to a new
        place in the queue after a backoff; terminal errors are raised. Invalid
        names raise before anything is sent.
        """
        return self._acquire(name, timeout, cancel, on_waiting, on_lost, try_only=False)

    def try_acquire(
        self,
        name: str | bytes,
        *,
        on_lost: LostCallback | None = None,
    ) -> Lock:
        """Take the lock ``name`` if it is free right now, else raise
        :class:`~monolock.errors.LockBusy`. One pass over the servers without
        sleeps or re-queues: the last error is raised."""
        return self._acquire(name, None, None, None, on_lost, try_only=True)

    @contextmanager
    def lock(
        self,
        name: str | bytes,
        *,
        timeout: float | None = None,
        cancel: threading.Event | None = None,
        on_waiting: WaitingCallback | None = None,
        on_lost: LostCallback | None = None,
    ) -> Iterator[Lock]:
        """``with client.lock(name) as lock:`` acquires like :meth:`acquire`
        and releases when the block ends."""
        held = self.acquire(
            name, timeout=timeout, cancel=cancel, on_waiting=on_waiting, on_lost=on_lost
        )
        try:
            yield held
        finally:
            held.release()

    def _acquire(
        self,
        name: str | bytes,
        timeout: float | None,
        cancel: threading.Event | None,
        on_waiting: WaitingCallback | None,
        on_lost: LostCallback | None,
        *,
        try_only: bool,
    ) -> Lock:
        plan: Generator[Step, Lock | Failure | None, Lock]
        raw, plan = prepare_acquisition(self, name, timeout, try_only=try_only)

        def attempt(step: Attempt) -> Lock | Failure:
            if cancel is not None and cancel.is_set():
                raise AcquireCancelled()
            sock = _open_socket(self, step.address, step.connect_timeout)
            session = Session(raw, self.lease_ms, try_only=try_only, server=str(step.address))
            conn = _ThreadConnection(sock, session, on_waiting, on_lost)
            conn.start()
            return conn.wait_outcome(step.deadline, cancel)

        def sleep(seconds: float) -> None:
            if cancel is None:
                time.sleep(seconds)
            elif cancel.wait(seconds):
                raise AcquireCancelled()

        return run_sync(plan, attempt, sleep)


def lock(
    name: str | bytes,
    servers: Servers = DEFAULT_SERVER,
    *,
    lease: float = DEFAULT_LEASE,
    timeout: float | None = None,
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
) -> AbstractContextManager[Lock]:
    """One-liner: ``with monolock.lock("jobs/nightly") as lock:`` holds the
    lock for the block. Arguments as for :class:`Client` and
    :meth:`Client.acquire`."""
    client = Client(
        servers,
        lease=lease,
        connect_timeout=connect_timeout,
        ssl_context=ssl_context,
        server_hostname=server_hostname,
    )
    return client.lock(name, timeout=timeout)
