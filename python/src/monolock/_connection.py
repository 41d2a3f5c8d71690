"""The blocking client's per-connection driver: one claim's socket, from
connect (or adoption of a socket the caller connected) through ACQUIRE,
heartbeats and the hand-back of a released lock to the final close. The
rules are the sans-IO session's (:mod:`monolock._session`); this only moves
bytes and time between it and the socket, on the keeper thread
(:mod:`monolock._reactor`), and posts notes to the acquiring thread.
"""

from __future__ import annotations

import _socket
import errno
import os
import socket
import ssl
import sys
import threading
import time
from collections import deque
from contextlib import suppress
from typing import Callable, Union, cast

from ._config import Address
from ._connecting import connect_error
from ._failure import Failure
from ._lock import (
    ConnectionHandler,
    HeldLock,
    LostCallback,
    WaitingCallback,
    _call_hook,
    release_wait,
    settles_proclaims,
)
from ._log import logger
from ._plan import timeout_error
from ._reactor import MAX_SELECT, READ, WRITE, Handler, Keeper, Latch, tell
from ._session import Close, Failed, Granted, Lost, Queued, Send, Session, SessionEvent
from ._tls import TlsSessions, close_notify
from .errors import AcquireCancelled, ConnectionClosed, LockLost

_RECV_SIZE = 4096
# Granularity at which a blocked acquire notices its ``cancel`` event;
# only used when one is given.
_CANCEL_POLL = 0.01

_WANT = (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError)

SockAddr = tuple[int, int, tuple[object, ...]]
"""(family, proto, sockaddr) of one address to connect to."""

# Socket type flags for a socket created non-blocking (Linux); elsewhere
# setblocking(False) follows the creation.
_NONBLOCK = getattr(socket, "SOCK_NONBLOCK", 0)
_STREAM = socket.SOCK_STREAM | _NONBLOCK
_CONNECTING = {errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN, errno.EALREADY}
_TCP_INFO = getattr(socket, "TCP_INFO", None) if sys.platform.startswith("linux") else None
_TCP_ESTABLISHED = 1  # tcpi_state, the first byte of Linux's struct tcp_info


def _established(sock: socket.socket) -> bool:
    """Whether a connect in progress has completed already, as it usually
    has on loopback by the time connect() returns: then there is no need to
    wait for the socket to become writable."""
    if _TCP_INFO is None:
        return False
    try:
        return sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, 1)[0] == _TCP_ESTABLISHED
    except OSError:
        return False


_Note = Union[Queued, Granted, Failed, None]
"""What the keeper posts to the acquiring thread; None: the connection
closed."""


class Connection(ConnectionHandler[HeldLock], Handler):
    """One claim's connection. Everything but the methods marked *caller*
    runs on the keeper thread, which alone touches the socket, the session's
    I/O inputs and the timers; the caller's thread only waits for notes
    (:meth:`acquire`) or for the close (:meth:`let_go`). The public client
    binds it to its lock type (``_make_lock``)."""

    def __init__(
        self,
        keeper: Keeper,
        session: Session,
        on_waiting: WaitingCallback | None,
        on_lost: LostCallback | None,
    ) -> None:
        super().__init__(session, on_waiting, on_lost)
        self._keeper = keeper
        self._sock: socket.socket = _NO_SOCKET
        self._fd = -1
        self._events = 0
        """The selector events the socket is registered for, 0 when not."""
        self._out = bytearray()
        self._timer: int | None = None
        """The keeper's id of the connection's timer."""
        self._notes: deque[_Note] = deque()
        self._noted = threading.Lock()  # released when there are notes
        self._noted.acquire()
        self._closed = Latch()
        # Connecting: the addresses left to try and this try's deadline.
        self._connecting = False
        self._address: Address | None = None
        self._candidates: list[SockAddr] = []
        self._connect_timeout: float | None = None
        self._connect_until: int | None = None
        self._connect_error: OSError | None = None
        self._handback_until: int | None = None
        """Set while a release waits for the server's close."""
        self._sessions: TlsSessions | None = None
        self._notified = False
        """Whether the TLS end (session kept, close_notify) is done."""
        self._let_go = False
        self._telling = False
        self._close_pending = False
        self._proclaims = threading.Condition()
        """Notified when a caller waiting in ``proclaim`` must look again."""

    # -- the caller's thread ---------------------------------------------

    def acquire(self, deadline: float | None, cancel: threading.Event | None) -> HeldLock | Failure:
        """*Caller*: wait until granted or failed, running ``on_waiting``
        here; close the connection on a timeout, a cancel or a failure."""
        try:
            while not self._take_notes():
                now = time.monotonic()
                if cancel is not None and cancel.is_set():
                    break
                if deadline is not None and now >= deadline:
                    break
                wait = -1.0 if deadline is None else min(deadline - now, MAX_SELECT)
                if cancel is not None:
                    wait = _CANCEL_POLL if wait < 0 else min(wait, _CANCEL_POLL)
                self._noted.acquire(timeout=wait)
        except BaseException:  # KeyboardInterrupt: leave the queue too
            self._keeper.submit(self._let_go_now)
            raise
        lock, error = self.lock, self.error
        if lock is not None:
            return lock
        self.let_go()
        if error is None:
            if cancel is not None and cancel.is_set():
                error = AcquireCancelled()
            elif deadline is not None and time.monotonic() >= deadline:
                error = timeout_error(self.session.name)
            else:
                error = ConnectionClosed("monolock: connection ended")
        return self.failure(error)

    def _take_notes(self) -> bool:
        """*Caller*: act on the keeper's notes; whether the outcome is known."""
        notes = self._notes
        while notes:
            note = notes.popleft()
            if isinstance(note, Queued):
                logger.debug("acquire %r: queued by %s", self.session.name, self.session.server)
                if self._on_waiting is not None:
                    _call_hook(self._on_waiting, self.session.name)
            elif isinstance(note, Granted):
                logger.debug(
                    "acquire %r: granted by %s, token %d",
                    self.session.name,
                    self.session.server,
                    note.token,
                )
                return True
            else:  # failed, or closed without an outcome
                return True
        return False

    def proclaim(self, value: bytes) -> int:
        """*Caller*: hand in a new value (see :meth:`Session.proclaim`) and
        have the keeper send it; returns its number, 0 when nothing goes."""
        number = self.session.proclaim(value)
        if number:
            self._keeper.submit(self._send_pending)
        return number

    def wait_proclaimed(self, settled: Callable[[], bool]) -> None:
        """*Caller*: wait until ``settled()`` (which raises when the lock has
        ended): asked again after each acknowledged PROCLAIM, loss and close,
        and at the validity deadline, where a poll decides the loss."""
        with self._proclaims:
            while not settled():
                left = self.session.expires_at - time.monotonic_ns()
                self._proclaims.wait(max(0, left) / 1e9)

    def let_go(self) -> None:
        """*Caller*: let go and return once the connection is closed, after
        the server's close (bounded) if the lock was valid. Idempotent."""
        if not self._closed.is_open:
            self._keeper.submit(self._let_go_now)
            self._closed.wait()

    # -- the keeper's thread: jobs -----------------------------------------

    def connect(self, address: Address, candidates: list[SockAddr], timeout: float | None) -> None:
        """Connect to the first of ``candidates`` that answers, each within
        ``timeout`` seconds, then send ACQUIRE."""
        self._address, self._candidates, self._connect_timeout = address, candidates, timeout
        self._connect_next()

    def adopt(
        self,
        sock: socket.socket,
        address: Address | None = None,
        sessions: TlsSessions | None = None,
    ) -> None:
        """Serve a socket connected (and TLS-shaken) by the caller; with
        ``sessions``, keep its TLS session for the next connection to
        ``address`` when it closes."""
        if sessions is not None:
            self._address, self._sessions = address, sessions
        if self.session.closed:  # let go of before it got here
            self._sock = sock
            self._finish_close()
            return
        self._use(sock)
        self._start()

    def _send_pending(self) -> None:
        """Send a PROCLAIM handed in, unless the connection is closing."""
        if not (self._closed.is_open or self._handback_until is not None or self._close_pending):
            self._serve(0)

    def _let_go_now(self) -> None:
        """The application lets go: close, handing back a valid lock."""
        self._let_go = True
        self.session.release()
        if self._closed.is_open or self._handback_until is not None:
            return  # closed, or closing already
        if self._connecting or self._close_pending:
            self._finish_close()  # not connected yet, or lost and only told so far
            return
        self._serve(0)

    # -- the keeper's thread: I/O ---------------------------------------------

    def _connect_next(self) -> None:
        """Try the next address; fail once none is left."""
        while self._candidates:
            family, proto, sockaddr = self._candidates.pop(0)
            try:
                # The C socket type: socket.socket's Python layer (makefile
                # reference counting) is not needed here, and costs.
                sock = cast(socket.socket, _socket.socket(family, _STREAM, proto))
            except OSError as exc:  # out of descriptors, say
                self._connect_failed(exc)
                continue
            if not _NONBLOCK:
                sock.setblocking(False)
            err = sock.connect_ex(sockaddr)
            if err in _CONNECTING and not _established(sock):
                self._connecting = True
                self._use(sock, WRITE)  # writable once connected (or refused)
                if self._connect_timeout is not None:
                    self._connect_until = time.monotonic_ns() + int(self._connect_timeout * 1e9)
                self._keeper.watch(self, self._connect_until)
                return
            if not err or err in _CONNECTING:
                self._use(sock)
                self._start()
                return
            sock.close()
            self._connect_failed(OSError(err, os.strerror(err)))
        self._fail(self._connect_error or OSError("getaddrinfo returns an empty list"))

    def _connect_failed(self, exc: OSError) -> None:
        if self._connect_error is None:
            self._connect_error = exc  # the first address's error, as create_connection

    def _connect_done(self, timed_out: bool) -> None:
        """A pending connect became writable, or its time is up."""
        self._connecting, self._connect_until = False, None
        sock = self._sock
        err = 0 if timed_out else sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if not timed_out and not err:
            self._events = READ
            self._keeper.modify(self)
            self._start()
            return
        self._unregister()
        self._sock = _NO_SOCKET
        sock.close()
        self._connect_failed(
            TimeoutError("timed out") if timed_out else OSError(err, os.strerror(err))
        )
        self._connect_next()

    def _fail(self, exc: OSError) -> None:
        assert self._address is not None
        self.session.release()  # the session never started: nothing to close
        self.error = connect_error(self._address, exc)
        self._note(Failed(self.error))
        self._finish_close()

    def _use(self, sock: socket.socket, events: int = READ) -> None:
        self._sock, self._fd = sock, sock.fileno()
        self._events = events
        self._keeper.register(self)

    def _start(self) -> None:
        """Connected: send ACQUIRE."""
        if not isinstance(self._sock, ssl.SSLSocket):
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._drive(self.session.start(time.monotonic_ns()))
        self._rewatch()

    def on_ready(self, mask: int, hung_up: bool = False) -> None:
        """The selector says the socket is ready (``hung_up``: closed both
        ways, when the poller knows)."""
        if self._closed.is_open or not self._events:
            return  # closed by an earlier event of the same select()
        if self._connecting:
            self._connect_done(timed_out=False)
        elif self._handback_until is not None:
            if hung_up:  # our half-close and the server's close: done
                self._finish_close()
            else:
                self._read_handback()
        else:
            self._serve(mask)

    def on_timer(self) -> None:
        """The connection's timer is due."""
        now = time.monotonic_ns()
        if self._connecting:
            if self._connect_until is not None and now >= self._connect_until:
                self._connect_done(timed_out=True)
            else:
                self._keeper.watch(self, self._connect_until)
        elif self._handback_until is not None:
            if now >= self._handback_until:
                self._finish_close()
            else:
                self._keeper.watch(self, self._handback_until)
        elif not self._closed.is_open:
            self._serve(0)

    def _serve(self, mask: int) -> None:
        """Carry out what ``mask`` (selector events, 0 for a timer or a
        release) and the clock have made due, then set the next timer."""
        try:
            events: list[SessionEvent] = []
            if mask & WRITE:
                events += self._flush()
            if mask & READ and not self.session.closed:
                events += self._read()
            events += self.session.tick(time.monotonic_ns())
            self._drive(events)
        except Exception as exc:  # a bug here must still end the claim visibly
            self.crash(exc)
            return
        self._rewatch()

    def crash(self, exc: Exception) -> None:
        """A bug on the keeper: end the claim visibly (a held lock is told
        lost, a waiting caller gets an error) and close, whatever happens."""
        logger.exception("monolock keeper: lock %r failed", self.session.name, exc_info=exc)
        try:
            if self.lock is not None:
                self._process(self.session.connection_lost(exc))
            elif self.error is None:
                self.session.release()
                self.error = ConnectionClosed(f"monolock: client error: {exc!r}")
                self._note(Failed(self.error))
        finally:
            if self._telling:  # told first: the teller's end closes it
                self._close_pending = True
                self._unregister()
                self._keeper.watch(self, None)
            else:
                self._finish_close()

    def _rewatch(self) -> None:
        """Selector events and timer after the session has moved on."""
        if self._closed.is_open or self._handback_until is not None or self._close_pending:
            return
        if self.session.closed:  # let go of before it was connected
            self._finish_close()
            return
        want = READ | (WRITE if self._out else 0)
        if want != self._events:
            self._events = want
            self._keeper.modify(self)
        self._keeper.watch(self, self.session.next_wakeup())

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
        except _WANT:
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
        except _WANT:
            pass
        except OSError as exc:
            return self.session.connection_lost(exc)
        return []

    def _hand_back(self) -> None:
        """Half-close, then wait (bounded) for the server's close, which
        tells that the lock is free on the server."""
        self._end_tls()
        try:
            # socket.socket's own shutdown: SSLSocket's would drop the TLS
            # state that is still needed to read the server's close.
            socket.socket.shutdown(self._sock, socket.SHUT_WR)
        except OSError:
            self._finish_close()
            return
        wait_ns = int(release_wait(self.session) * 1e9)
        self._handback_until = time.monotonic_ns() + wait_ns
        if self._events != READ:
            self._events = READ
            self._keeper.modify(self)
        self._keeper.watch(self, self._handback_until)

    def _read_handback(self) -> None:
        try:
            while self._sock.recv(_RECV_SIZE):
                pass  # what the server still sent: not needed any more
        except _WANT:
            return  # more to come
        except OSError:
            pass
        self._finish_close()

    def _finish_close(self) -> None:
        """Close the socket for good and tell whoever waits."""
        self._out.clear()
        self._unregister()
        if self._timer is not None:
            self._keeper.watch(self, None)
        self._handback_until = self._connect_until = None
        self._connecting = False
        self._end_tls()
        with suppress(OSError):
            self._sock.close()
        if not self._closed.is_open:
            self._closed.open(self._keeper)
            if not self.outcome_known:
                self._note(None)  # the acquiring thread still waits
            self._wake_proclaimers()

    def _end_tls(self) -> None:
        """TLS, once, before the close: keep the session (its ticket came
        with the server's first reply) for the next claim, then send
        close_notify."""
        if self._notified:
            return
        self._notified = True
        if self._sessions is not None and self._address is not None:
            self._sessions.keep(self._address, self._sock)
        close_notify(self._sock)

    def _unregister(self) -> None:
        if self._events:
            self._events = 0
            self._keeper.unregister(self)

    def _note(self, note: _Note) -> None:
        """Post a note to the acquiring thread and wake it (when the
        keeper's current step ends)."""
        self._notes.append(note)
        self._keeper.wake_later(self._wake)

    def _wake(self) -> None:
        with suppress(RuntimeError):  # already released: it has not looked yet
            self._noted.release()

    def _tell_then_close(self, error: LockLost) -> None:
        """On a teller thread: tell the loss (the event, the callbacks, the
        log), then let the keeper carry out a close that waited for it."""
        try:
            super()._tell(error)
        finally:
            self._keeper.submit(self._told)

    def _told(self) -> None:
        self._telling = False
        if self._close_pending:
            self._close_pending = False
            self._finish_close()

    # -- ConnectionHandler -----------------------------------------------

    def _process(self, events: list[SessionEvent]) -> None:
        # The keeper runs no user code: queued and granted go to the caller
        # as notes, with their logs; losses to a teller.
        for event in events:
            if isinstance(event, Send):
                self._out += event.data
            elif isinstance(event, Queued):
                self._queued_at = time.monotonic()
                self._note(event)
            elif isinstance(event, Granted):
                self.lock = self._make_lock()
                if self._on_lost is not None:
                    self.lock.add_lost_callback(self._on_lost)
                self._note(event)
            elif isinstance(event, Lost):
                self._tell(event.error)
            elif isinstance(event, Failed):
                self.error = event.error
                self._note(event)
            elif isinstance(event, Close):
                self._close_transport(event.handback)
        if settles_proclaims(events):
            self._wake_proclaimers()

    def _write(self, data: bytes) -> None:
        self._out += data

    def _close_transport(self, handback: bool) -> None:
        self._out.clear()
        if handback and self._sock.fileno() != -1:
            self._hand_back()
        elif self._telling and not self._let_go:
            self._close_pending = True  # after the telling: told first
            self._unregister()
            self._keeper.watch(self, None)
        else:
            self._finish_close()

    def _tell(self, error: LockLost) -> None:
        # Callbacks are user code, which may be slow: a teller thread sets
        # the event and runs them, so that the keeper never waits for them.
        self._telling = True
        tell(self._tell_then_close, error)

    def _outcome_known(self) -> None:
        pass  # notes tell the acquiring thread

    def _wake_proclaimers(self) -> None:
        self._keeper.wake_later(self._notify_proclaimers)

    def _notify_proclaimers(self) -> None:
        with self._proclaims:
            self._proclaims.notify_all()


class _NoSocket:
    """Stands for the socket before there is one (and after a failed connect)."""

    def fileno(self) -> int:
        return -1

    def close(self) -> None:
        pass


_NO_SOCKET: socket.socket = _NoSocket()  # type: ignore[assignment]
