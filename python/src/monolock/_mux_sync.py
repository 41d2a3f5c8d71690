"""The blocking client's session (protocol version 4): :class:`Session`,
many claims over one connection.

The connection is served by the process's keeper thread
(:mod:`monolock._reactor`) like every claim's own connection: it reads,
writes, heartbeats and watches the deadline through the sans-IO core
(:mod:`monolock._mux`). Callers' threads hand in claims and releases and
wait on one condition that the keeper notifies after every step. Losses are
told on a teller thread, never on the keeper, and the connection closes
only once they have been told.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Callable

from ._config import check_timeout
from ._lock import LostCallback, WaitingCallback, release_wait
from ._log import logger
from ._mux import (
    Changed,
    ClaimStream,
    Ended,
    Lost,
    MuxCore,
    MuxEvent,
    Ready,
    SessionView,
    Stream,
    WatchStream,
)
from ._plan import check_mode, timeout_error
from ._protocol import encode_name, encode_value
from ._reactor import MAX_SELECT, READ, WRITE, Handler, Keeper, tell
from ._session import Close, Send
from ._tls import close_notify
from ._watch import LockState, Observation, leader_of, next_transition, watch_timeout
from .errors import AcquireCancelled, ConnectionClosed, LockLost, MonolockError, unprefixed

if TYPE_CHECKING:
    from .client import Lock, Term

_RECV_SIZE = 65536
_WANT = (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError)
_CANCEL_POLL = 0.05


class _MuxConnection(Handler):
    """The keeper's side of one session's socket."""

    def __init__(self, keeper: Keeper, core: MuxCore) -> None:
        self._keeper = keeper
        self.core = core
        self._fd = -1
        self._events = 0
        self._timer: int | None = None
        self._sock: socket.socket | None = None
        self._out = bytearray()
        self.changed = threading.Condition()
        """Notified after every step of the keeper: waiters look again."""
        self.closed = threading.Event()
        self._telling = 0
        self._close_pending = False
        self._handback_until: int | None = None
        self._notified = False
        """Whether a TLS close_notify went out (or cannot any more)."""

    # -- any thread --------------------------------------------------------------

    def kick(self) -> None:
        """Have the keeper send what the application handed in."""
        self._keeper.submit(self._serve, 0)

    def wait(self, until: Callable[[], bool], deadline: float | None) -> bool:
        """Wait until ``until()`` or the monotonic ``deadline``; whether it
        came true."""
        with self.changed:
            while not until():
                if deadline is None:
                    self.changed.wait(MAX_SELECT)
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(min(left, MAX_SELECT))
            return True

    def let_go(self) -> None:
        """Close the session (the core's :meth:`MuxCore.close` came first)
        and return once the connection is closed."""
        self._keeper.submit(self._let_go_now)
        self.closed.wait()

    # -- the keeper's thread ----------------------------------------------------

    def _let_go_now(self) -> None:
        if self._close_pending:
            # Losses are being told (maybe by the caller's own lost
            # callback, which closes the session): close now.
            self._close_pending = False
            self._finish_close()
        else:
            self._serve(0)

    def adopt(self, sock: socket.socket) -> None:
        """Serve a socket connected (and TLS-shaken) by the caller."""
        self._sock, self._fd = sock, sock.fileno()
        self._events = READ
        self._keeper.register(self)
        self._drive(self.core.start(time.monotonic_ns()))
        self._rewatch()

    def on_ready(self, mask: int, hung_up: bool = False) -> None:
        """The socket is ready."""
        if self.closed.is_set() or not self._events:
            return
        if self._handback_until is not None:
            self._read_handback(hung_up)
        else:
            self._serve(mask)

    def on_timer(self) -> None:
        """The timer is due."""
        if self._handback_until is not None:
            if time.monotonic_ns() >= self._handback_until:
                self._finish_close()
            else:
                self._keeper.watch(self, self._handback_until)
        elif not self.closed.is_set():
            self._serve(0)

    def crash(self, exc: Exception) -> None:
        """A bug on the keeper: end the session visibly."""
        logger.exception("monolock keeper: session failed", exc_info=exc)
        try:
            self._process(self.core.connection_lost(exc))
        finally:
            if not self._telling:
                self._finish_close()

    def _serve(self, mask: int) -> None:
        if self.closed.is_set() or self._handback_until is not None or self._close_pending:
            return
        try:
            events: list[MuxEvent] = []
            if mask & WRITE:
                events += self._flush()
            if mask & READ:
                events += self._read()
            events += self.core.tick(time.monotonic_ns())
            self._drive(events)
        except Exception as exc:
            self.crash(exc)
            return
        self._rewatch()

    def _rewatch(self) -> None:
        if self.closed.is_set() or self._handback_until is not None or self._close_pending:
            return
        want = READ | (WRITE if self._out else 0)
        if want != self._events:
            self._events = want
            self._keeper.modify(self)
        self._keeper.watch(self, self.core.next_wakeup())

    def _drive(self, events: list[MuxEvent]) -> None:
        self._process(events)
        if self._out and not self.core.closed:
            self._process(self._flush())

    def _read(self) -> list[MuxEvent]:
        assert self._sock is not None
        chunks: list[bytes] = []
        ended, cause = False, None
        try:
            while True:
                data = self._sock.recv(_RECV_SIZE)
                if not data:
                    ended = True
                    break
                chunks.append(data)
                if isinstance(self._sock, ssl.SSLSocket) and self._sock.pending():
                    continue
                if len(data) < _RECV_SIZE:
                    break
        except _WANT:
            pass
        except OSError as exc:
            ended, cause = True, exc
        events: list[MuxEvent] = []
        if chunks:
            events += self.core.receive_data(b"".join(chunks), time.monotonic_ns())
        if ended:
            events += self.core.connection_lost(cause)
        return events

    def _flush(self) -> list[MuxEvent]:
        assert self._sock is not None
        try:
            while self._out:
                sent = self._sock.send(self._out)
                del self._out[:sent]
        except _WANT:
            pass
        except OSError as exc:
            return self.core.connection_lost(exc)
        return []

    def _process(self, events: list[MuxEvent]) -> None:
        losses: list[tuple[ClaimStream, LockLost]] = []
        for event in events:
            if isinstance(event, Send):
                self._out += event.data
            elif isinstance(event, Changed):
                self._grant(self.core.streams.get(event.stream))
            elif isinstance(event, Lost):
                self._grant(event.stream)
                losses.append((event.stream, event.error))
            elif isinstance(event, Close):
                if losses:  # told first: the teller's end closes
                    self._tell(losses)
                    losses = []
                self._close_transport(event.handback)
            elif isinstance(event, (Ready, Ended)):
                pass
        if losses:
            self._tell(losses)
        with self.changed:
            self.changed.notify_all()

    def _grant(self, stream: Stream | None) -> None:
        """Build the lock of a granted stream, here, so that a loss told
        right after the grant has its lock to tell."""
        if not isinstance(stream, ClaimStream) or stream.token is None or stream.lock is not None:
            return
        from .client import Lock, Term  # client imports this module

        kind = Term if stream.term else Lock
        lock = kind(_StreamConn(self, stream), stream)
        if stream.on_lost is not None:
            lock.add_lost_callback(stream.on_lost)
        stream.lock = lock

    def _tell(self, losses: list[tuple[ClaimStream, LockLost]]) -> None:
        self._telling += 1
        tell(self._tell_then_close, losses)

    def _tell_then_close(self, losses: list[tuple[ClaimStream, LockLost]]) -> None:
        """On a teller thread: tell every loss, then let the keeper close."""
        try:
            for stream, error in losses:
                stream.lock._tell_lost(error)
                logger.info("%s", unprefixed(error))
        finally:
            self._keeper.submit(self._told)

    def _told(self) -> None:
        self._telling -= 1
        if self._close_pending and not self._telling:
            self._close_pending = False
            self._finish_close()

    def _close_transport(self, handback: bool) -> None:
        self._out.clear()
        if self._telling:
            self._close_pending = True
            self._unregister()
            self._keeper.watch(self, None)
        elif handback and self._sock is not None:
            self._hand_back()
        else:
            self._finish_close()

    def _hand_back(self) -> None:
        """Half-close and wait (bounded) for the server's close: then the
        server has released every claim of the session."""
        assert self._sock is not None
        self._close_notify()
        try:
            # socket.socket's own shutdown: SSLSocket's would drop the TLS
            # state that is still needed to read the server's close.
            socket.socket.shutdown(self._sock, socket.SHUT_WR)
        except OSError:
            self._finish_close()
            return
        wait = min(self.core.schedule.client_timeout_ms / 1000, 1.0)
        self._handback_until = time.monotonic_ns() + int(wait * 1e9)
        if self._events != READ:
            self._events = READ
            self._keeper.modify(self)
        self._keeper.watch(self, self._handback_until)

    def _read_handback(self, hung_up: bool) -> None:
        assert self._sock is not None
        if not hung_up:
            try:
                while self._sock.recv(_RECV_SIZE):
                    pass
            except _WANT:
                return
            except OSError:
                pass
        self._finish_close()

    def _finish_close(self) -> None:
        self._out.clear()
        self._unregister()
        if self._timer is not None:
            self._keeper.watch(self, None)
        self._handback_until = None
        if self._sock is not None:
            self._close_notify()
            with suppress(OSError):
                self._sock.close()
        self.closed.set()
        with self.changed:
            self.changed.notify_all()

    def _unregister(self) -> None:
        if self._events:
            self._events = 0
            self._keeper.unregister(self)

    def _close_notify(self) -> None:
        """TLS: send close_notify, once, before the FIN; without one the
        server holds the session's claims for the lease instead of
        releasing them (see :func:`monolock._tls.close_notify`)."""
        if self._notified or self._sock is None:
            return
        self._notified = True
        close_notify(self._sock)


class _StreamConn:
    """What a stream's :class:`~monolock.Lock` asks of its session."""

    def __init__(self, conn: _MuxConnection, stream: ClaimStream) -> None:
        self._conn = conn
        self._stream = stream

    def let_go(self) -> None:
        # The lock has handed in the release (stream.release()); return
        # once RELEASED says the claim is out of the server's table.
        stream, core = self._stream, self._conn.core
        self._conn.kick()
        deadline = time.monotonic() + release_wait(stream)
        self._conn.wait(lambda: stream.released_acked or core.closed, deadline)

    def proclaim(self, value: bytes) -> int:
        number = self._conn.core.proclaim(self._stream, value)
        if number:
            self._conn.kick()
        return number

    def wait_proclaimed(self, settled: Callable[[], bool]) -> None:
        stream = self._stream
        with self._conn.changed:
            while not settled():
                left = stream.expires_at - time.monotonic_ns()
                self._conn.changed.wait(max(0, left) / 1e9)


class SessionWatch:
    """A watch of one lock name on a session (:meth:`Session.watch`): the
    same readings as :class:`monolock.Watch`. Its picture is vouched for
    until the session's validity deadline; when the session ends, the
    watch ends (``known=False``, :attr:`error` set): it does not
    reconnect. Close it with :meth:`close` or a ``with`` block."""

    def __init__(self, conn: _MuxConnection, stream: WatchStream) -> None:
        self._conn = conn
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

    def wait_changed(self, timeout: float | None = None) -> bool:
        """Wait until the picture changes, or stops being vouched for, or
        the watch ends, after the last call; False when ``timeout`` seconds
        passed first. A signal, not a queue: read :meth:`state` after it."""
        stream = self._stream
        deadline = None if timeout is None else time.monotonic() + timeout
        changed = self._conn.wait(lambda: stream.version != self._seen, deadline)
        self._seen = stream.version
        return changed

    @property
    def done(self) -> bool:
        """Whether the watch has ended (closed, or :attr:`error`)."""
        return self._stream.closed

    @property
    def error(self) -> MonolockError | None:
        """Why the watch ended (``None`` while it runs, and after :meth:`close`)."""
        return self._stream.error

    def observations(self) -> Iterator[Observation]:
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
            wait = next_transition(state, observation, now)
            self._wait_past(version, time.monotonic() + wait)

    def _wait_past(self, version: int, deadline: float) -> None:
        stream = self._stream
        self._conn.wait(lambda: stream.version != version, deadline)

    def close(self) -> None:
        """Release the watch's stream. Idempotent."""
        self._conn.core.release_watch(self._stream)
        self._conn.kick()

    def __enter__(self) -> SessionWatch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Session(SessionView):
    """Many claims over one connection (protocol version 4), from
    :meth:`monolock.Client.session`. Use it as a context manager, or call
    :meth:`close`.

    Every claim of a session shares its lease and its fate: one heartbeat
    keeps them all, and when the session's validity deadline passes (0.8 x
    lease after the last answered heartbeat), the connection ends or the
    server ends the session, every held claim is lost at once, told through
    each lock's ``lost`` event and callbacks before the connection closes.
    The locks are the same :class:`~monolock.Lock` as single claims. A
    claim that the server ends alone (a kick) is lost alone. Nothing inside
    a session is retried: an OPEN refused with a temporary code raises it.
    """

    def __init__(self, conn: _MuxConnection) -> None:
        self._conn = conn
        self._core = conn.core

    def acquire(
        self,
        name: str | bytes,
        *,
        shared: bool = False,
        limit: int | None = None,
        value: str | bytes | None = None,
        timeout: float | None = None,
        cancel: threading.Event | None = None,
        on_waiting: WaitingCallback | None = None,
        on_lost: LostCallback | None = None,
    ) -> Lock:
        """Claim ``name`` on this session and wait until it is granted;
        ``shared``, ``limit``, ``value``, ``on_waiting`` and ``on_lost`` as
        for :meth:`monolock.Client.acquire` (``on_waiting(name)`` runs on
        the calling thread, once, when the server queues the claim). ``timeout`` (seconds) raises
        :class:`~monolock.errors.AcquireTimeout`, a set ``cancel`` raises
        :class:`~monolock.errors.AcquireCancelled`; either leaves the queue
        (a RELEASE of the stream). A refusal raises its error class (no
        retry); the end of the session raises
        :class:`~monolock.errors.ConnectionClosed` or the server's error."""
        return self._acquire(
            name, shared, limit, value, timeout, cancel, on_lost, False, on_waiting=on_waiting
        )

    def campaign(
        self,
        name: str | bytes,
        value: str | bytes,
        *,
        timeout: float | None = None,
        cancel: threading.Event | None = None,
        on_waiting: WaitingCallback | None = None,
        on_lost: LostCallback | None = None,
    ) -> Term:
        """Wait until elected leader of ``name`` on this session, with
        ``value`` (it must not be empty), and return the
        :class:`~monolock.Term`; as :meth:`monolock.Client.campaign`."""
        from .client import Term, check_candidate_value

        check_candidate_value(name, value)
        term = self._acquire(
            name, False, None, value, timeout, cancel, on_lost, False,
            term=True, on_waiting=on_waiting,
        )  # fmt: skip
        assert isinstance(term, Term)
        return term

    def watch(self, name: str | bytes, *, timeout: float | None = None) -> SessionWatch:
        """Follow the lock ``name`` on this session: returns once its first
        picture is vouched for (:class:`~monolock.errors.WatchTimeout` after
        ``timeout`` seconds, or the error that refused it). From then on the
        session's heartbeats vouch for it; it ends with the session (it does
        not reconnect) or at :meth:`SessionWatch.close`."""
        raw = encode_name(name)
        timeout = check_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        stream = self._core.open_watch(raw)
        self._conn.kick()
        try:
            if not self._conn.wait(lambda: stream.vouched or stream.closed, deadline):
                raise watch_timeout(stream.name, None)
        except BaseException:
            self._core.release_watch(stream)
            self._conn.kick()
            raise
        if stream.error is not None:
            raise stream.error
        return SessionWatch(self._conn, stream)

    def observe(self, name: str | bytes, *, timeout: float | None = None) -> Iterator[Observation]:
        """Follow the leadership of ``name`` on this session: an
        :class:`~monolock.Observation` whenever it changes, the first as
        soon as it is known; ends (with the watch's error) when the
        session ends. Close the generator to release the watch."""
        watch = self.watch(name, timeout=timeout)
        try:
            yield from watch.observations()
        finally:
            watch.close()

    def try_acquire(
        self,
        name: str | bytes,
        *,
        shared: bool = False,
        limit: int | None = None,
        value: str | bytes | None = None,
        on_lost: LostCallback | None = None,
    ) -> Lock:
        """Take ``name`` on this session if it is free right now, else raise
        :class:`~monolock.errors.LockBusy` (the claim leaves the queue)."""
        return self._acquire(name, shared, limit, value, None, None, on_lost, True)

    @contextmanager
    def lock(
        self,
        name: str | bytes,
        *,
        shared: bool = False,
        limit: int | None = None,
        value: str | bytes | None = None,
        timeout: float | None = None,
        on_lost: LostCallback | None = None,
    ) -> Iterator[Lock]:
        """``with session.lock(name) as lock:`` acquires and releases."""
        held = self.acquire(
            name, shared=shared, limit=limit, value=value, timeout=timeout, on_lost=on_lost
        )
        try:
            yield held
        finally:
            held.release()

    def close(self) -> None:
        """Release every claim and close the connection; returns once the
        server has closed too (bounded by min(0.8 x lease, 1 s)), so the
        claims are free on the server by then. Claims released before are
        not reported lost. Idempotent."""
        self._core.close()
        self._conn.let_go()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "alive" if self._core.ready else "closed"
        return f"<Session {self.server} {state} streams={self.open_streams}/{self.max_streams}>"

    def _acquire(
        self,
        name: str | bytes,
        shared: bool,
        limit: int | None,
        value: str | bytes | None,
        timeout: float | None,
        cancel: threading.Event | None,
        on_lost: LostCallback | None,
        try_only: bool,
        *,
        term: bool = False,
        on_waiting: WaitingCallback | None = None,
    ) -> Lock:
        shared, limit_n = check_mode(shared, limit)
        raw = encode_name(name)
        raw_value = encode_value(value)
        timeout = check_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        stream = self._core.open(
            raw, shared=shared, limit=limit_n, value=raw_value, try_only=try_only,
            on_lost=on_lost, term=term,
        )  # fmt: skip
        self._conn.kick()

        def settled() -> bool:
            return stream.lock is not None or (stream.settled and stream.token is None)

        told = on_waiting is None

        def news() -> bool:
            return settled() or (stream.queued and not told)

        try:
            while True:
                step = deadline
                if cancel is not None:
                    poll = time.monotonic() + _CANCEL_POLL
                    step = poll if deadline is None else min(deadline, poll)
                if self._conn.wait(news, step):
                    if stream.queued and not told:
                        told = True
                        assert on_waiting is not None
                        on_waiting(stream.name)  # before the grant is returned
                    if settled():
                        break
                    continue
                if cancel is not None and cancel.is_set():
                    raise AcquireCancelled()
                if deadline is not None and time.monotonic() >= deadline:
                    raise timeout_error(stream.name)
        except BaseException:
            stream.release()  # leave the queue (a lock granted meanwhile too)
            self._conn.kick()
            raise
        if stream.lock is not None:
            lock: Lock = stream.lock
            return lock
        if stream.error is not None:
            raise stream.error
        raise ConnectionClosed("monolock: the session has ended")  # never: settled says why


def open_session(keeper: Keeper, sock: socket.socket, lease_ms: int, server: str) -> Session:
    """Start a session on a connected socket and wait for SESSION_OK (at
    most 0.8 x lease: the core's deadline); raise the session's error."""
    core = MuxCore(lease_ms, server=server, guard=threading.RLock())
    conn = _MuxConnection(keeper, core)
    keeper.submit(conn.adopt, sock)
    conn.wait(lambda: core.ready or core.closed or core.error is not None, None)
    if not core.ready:
        # No claim was made: nothing to hold the connection open for (a
        # session that timed out would keep it until its lease's end).
        core.close()
        conn.kick()
        conn.closed.wait()
        assert core.error is not None
        raise core.error
    return Session(conn)
