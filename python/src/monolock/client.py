"""The blocking client: :class:`Client`, :class:`Lock` and :func:`lock`.

Each lock claim owns one connection, and every connection of the process is
served by one daemon thread, the *keeper*: it connects, sends ACQUIRE, reads
the server's frames, sends the heartbeats, watches each validity deadline
and closes, for all claims at once, from one selector and one heap of
timers. The caller's thread validates the call, runs the retry plan and
waits for what the keeper posts to it (queued, granted, failed, closed);
``on_waiting`` runs there. So a held lock stays held while the caller's
thread is busy, and its loss is told on time even then. A loss the keeper
finds is told on a teller thread (the ``lost`` event, then the callbacks),
while the connection stays open; the connection closes when the lock is
released or the lease has passed. :meth:`Lock.release` asks the keeper to
half-close and waits until the server has closed too (bounded).

Why one I/O thread: under the GIL every blocking call lets another thread
in, and a thread coming back from a system call waits for the GIL if any
other thread holds it. With each caller (or, before, each claim's own
thread) doing its own I/O, every one of a cycle's ten or so system calls
became a hand-off between threads, and the total rate of a thread pool fell
as threads were added (issue 16). The keeper makes those calls without
contention, and one select() serves many claims at once; each claim costs
its caller four wake-ups (acquire and release, there and back).
"""

from __future__ import annotations

import _socket
import errno
import heapq
import math
import os
import queue
import select
import selectors
import socket
import ssl
import sys
import threading
import time
from collections import deque
from collections.abc import Generator, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import Callable, Union, cast

from ._config import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_LEASE,
    DEFAULT_SERVER,
    Address,
    ClientConfig,
    Servers,
)
from ._lock import (
    BaseLock,
    ConnectionHandler,
    LostCallback,
    WaitingCallback,
    _call_hook,
    release_wait,
)
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
from ._session import Close, Failed, Granted, Lost, Queued, Send, Session, SessionEvent
from .errors import AcquireCancelled, ConnectionClosed, LockLost

__all__ = ["Client", "Lock", "lock"]

_RECV_SIZE = 4096
# Granularity at which a blocked acquire notices its ``cancel`` event;
# only used when one is given.
_CANCEL_POLL = 0.01
# Longest single wait (the keeper's poll, a caller's wait for a note): long
# leases and timeouts wake them up early.
_MAX_SELECT = 3600.0

_WANT = (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError)
_READ = selectors.EVENT_READ
_WRITE = selectors.EVENT_WRITE

SockAddr = tuple[int, int, tuple[object, ...]]
"""(family, proto, sockaddr) of one address to connect to."""


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

    def __init__(self, conn: _Connection, session: Session) -> None:
        super().__init__(session, threading.Event())
        self._conn = conn

    def release(self) -> None:
        """Release the lock by closing its connection; the server hands it to
        the next waiter at once. A valid lock's release returns once the
        server has closed its end too (at most ``min(0.8 x lease, 1 s)``), so
        the lock is free on the server by then; after a loss it closes at
        once. Idempotent."""
        self._mark_released()  # no loss is decided from now on
        self._conn.let_go()

    def __enter__(self) -> Lock:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


class _Latch:
    """A one-shot signal for any number of waiters, cheaper than an Event:
    a lock that is held until :meth:`open`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self.is_open = False

    def open(self, keeper: _Keeper | None = None) -> None:
        """Open it; with ``keeper``, the waiters wake when the keeper's
        current step ends (see :meth:`_Keeper.wake_later`)."""
        if not self.is_open:
            self.is_open = True
            if keeper is None:
                self._lock.release()
            else:
                keeper.wake_later(self._lock.release)

    def wait(self) -> None:
        if not self.is_open:
            with self._lock:  # each waiter passes it on to the next
                pass


_Note = Union[Queued, Granted, Failed, None]
"""What the keeper posts to the acquiring thread; None: the connection
closed."""


class _Connection(ConnectionHandler[Lock]):
    """One claim's connection. Everything but the methods marked *caller*
    runs on the keeper thread, which alone touches the socket, the session's
    I/O inputs and the timers; the caller's thread only waits for notes
    (:meth:`acquire`) or for the close (:meth:`let_go`)."""

    def __init__(
        self,
        keeper: _Keeper,
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
        self._closed = _Latch()
        # Connecting: the addresses left to try and this try's deadline.
        self._connecting = False
        self._address: Address | None = None
        self._candidates: list[SockAddr] = []
        self._connect_timeout: float | None = None
        self._connect_until: int | None = None
        self._connect_error: OSError | None = None
        self._handback_until: int | None = None
        """Set while a release waits for the server's close."""
        self._let_go = False
        self._telling = False
        self._close_pending = False

    # -- the caller's thread ---------------------------------------------

    def acquire(self, deadline: float | None, cancel: threading.Event | None) -> Lock | Failure:
        """*Caller*: wait until granted or failed, running ``on_waiting``
        here; close the connection on a timeout, a cancel or a failure."""
        try:
            while not self._take_notes():
                now = time.monotonic()
                if cancel is not None and cancel.is_set():
                    break
                if deadline is not None and now >= deadline:
                    break
                wait = -1.0 if deadline is None else min(deadline - now, _MAX_SELECT)
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

    def adopt(self, sock: socket.socket) -> None:
        """Serve a socket connected (and TLS-shaken) by the caller."""
        if self.session.closed:  # let go of before it got here
            self._sock = sock
            self._finish_close()
            return
        self._use(sock)
        self._start()

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
                self._use(sock, _WRITE)  # writable once connected (or refused)
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
            self._events = _READ
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

    def _use(self, sock: socket.socket, events: int = _READ) -> None:
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
            if mask & _WRITE:
                events += self._flush()
            if mask & _READ and not self.session.closed:
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
        want = _READ | (_WRITE if self._out else 0)
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
        try:
            # socket.socket's own shutdown: SSLSocket's would drop the TLS
            # state that is still needed to read the server's close.
            socket.socket.shutdown(self._sock, socket.SHUT_WR)
        except OSError:
            self._finish_close()
            return
        wait_ns = int(release_wait(self.session) * 1e9)
        self._handback_until = time.monotonic_ns() + wait_ns
        if self._events != _READ:
            self._events = _READ
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
        with suppress(OSError):
            self._sock.close()
        if not self._closed.is_open:
            self._closed.open(self._keeper)
            if not self.outcome_known:
                self._note(None)  # the acquiring thread still waits

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
        _tellers.submit(self._tell_then_close, error)

    def _outcome_known(self) -> None:
        pass  # notes tell the acquiring thread

    def _make_lock(self) -> Lock:
        return Lock(self, self.session)


class _NoSocket:
    """Stands for the socket before there is one (and after a failed connect)."""

    def fileno(self) -> int:
        return -1

    def close(self) -> None:
        pass


_NO_SOCKET: socket.socket = _NoSocket()  # type: ignore[assignment]


class _Tellers:
    """Threads that tell the losses the keeper finds, reused: a hand-over
    wakes an idle one, and a new one starts only when every teller is busy
    (in a slow callback, say), so no callback waits for another lock's."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[..., None], tuple[object, ...]]]
        self._jobs = queue.SimpleQueue()
        self._mutex = threading.Lock()
        self._idle = 0

    def submit(self, job: Callable[..., None], *args: object) -> None:
        with self._mutex:
            start = self._idle == 0
            if not start:
                self._idle -= 1  # that teller (or another idle one) takes it
        self._jobs.put((job, args))
        if start:
            try:
                self.start(idle=False)
            except RuntimeError:  # no thread to be had: tell it here, late never
                job, args = self._jobs.get()
                job(*args)

    def start(self, idle: bool = True) -> None:
        """Start a teller (``idle``: one that has no job handed to it yet)."""
        thread = threading.Thread(
            target=self._run, args=(idle,), name="monolock teller", daemon=True
        )
        thread.start()

    def _run(self, idle: bool) -> None:
        if idle:
            with self._mutex:
                self._idle += 1
        while True:
            job, args = self._jobs.get()
            try:
                job(*args)
            except Exception:  # never: the job logs its callbacks' errors
                logger.exception("monolock teller failed")
            with self._mutex:
                self._idle += 1


_tellers = _Tellers()


class _Waker:
    """Wakes the keeper from its poll: a socket pair whose byte is read
    back (the portable way)."""

    def __init__(self) -> None:
        self.reader, self._writer = socket.socketpair()
        self.reader.setblocking(False)
        self._writer.setblocking(False)

    def wake(self) -> None:
        with suppress(OSError):  # full: a wake-up is pending anyway
            self._writer.send(b"\0")

    def drain(self) -> None:
        with suppress(OSError):
            while self.reader.recv(512):
                pass


class _EventFdWaker:
    """Wakes the keeper through an eventfd watched edge-triggered: every
    write is one wake-up, and nothing needs reading back (one system call
    per wake-up instead of two)."""

    def __init__(self) -> None:
        self.fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)

    def wake(self) -> None:
        with suppress(OSError):
            os.eventfd_write(self.fd, 1)

    def drain(self) -> None:
        pass


class _SelectorPoller:
    """The keeper's view of a :mod:`selectors` selector (any platform)."""

    def waker(self) -> _Waker | _EventFdWaker:
        waker = _Waker()
        self.register(waker.reader.fileno(), _READ, None)
        return waker

    def __init__(self) -> None:
        self._sel = selectors.DefaultSelector()

    def register(self, fd: int, events: int, conn: _Connection | None) -> None:
        self._sel.register(fd, events, conn)

    def modify(self, fd: int, events: int, conn: _Connection) -> None:
        self._sel.modify(fd, events, conn)

    def unregister(self, fd: int) -> None:
        """Stop watching ``fd``, which is about to be closed."""
        with suppress(KeyError, ValueError):
            self._sel.unregister(fd)

    def poll(self, timeout: float | None) -> list[tuple[_Connection | None, int, bool]]:
        """(connection, selector events, hung up) of each ready socket;
        hung up is never known here."""
        return [(key.data, mask, False) for key, mask in self._sel.select(timeout)]

    def __len__(self) -> int:
        return len(self._sel.get_map())


class _EpollPoller:
    """The keeper's epoll (Linux), without the selectors layer: a socket
    about to be closed is only forgotten, since closing its descriptor takes
    it out of the epoll set (one system call less per claim), and a
    hang-up is reported as such (a closed peer needs no read to be seen).

    Closing takes it out only when no other descriptor shares the socket:
    after a fork the child holds copies of the sockets open then, so those
    are taken out explicitly."""

    def __init__(self) -> None:
        self._ep = select.epoll()
        self._conns: dict[int, _Connection | None] = {}
        self._born: dict[int, int] = {}
        """The fork count when each descriptor was registered."""

    def waker(self) -> _Waker | _EventFdWaker:
        if not hasattr(os, "eventfd"):  # Python < 3.10
            waker = _Waker()
            self.register(waker.reader.fileno(), _READ, None)
            return waker
        efd = _EventFdWaker()
        self._ep.register(efd.fd, select.EPOLLIN | select.EPOLLET)
        self._conns[efd.fd] = None
        return efd

    @staticmethod
    def _mask(events: int) -> int:
        return (select.EPOLLIN if events & _READ else 0) | (
            select.EPOLLOUT if events & _WRITE else 0
        )

    def register(self, fd: int, events: int, conn: _Connection | None) -> None:
        self._ep.register(fd, self._mask(events))
        self._conns[fd] = conn
        self._born[fd] = _forks

    def modify(self, fd: int, events: int, conn: _Connection) -> None:
        self._ep.modify(fd, self._mask(events))

    def unregister(self, fd: int) -> None:
        """Stop watching ``fd``, which is about to be closed."""
        if self._conns.pop(fd, None) is not None and self._born.pop(fd) != _forks:
            with suppress(OSError):
                self._ep.unregister(fd)  # a child may share it: the close would not

    def poll(self, timeout: float | None) -> list[tuple[_Connection | None, int, bool]]:
        """(connection, selector events, hung up) of each ready socket."""
        if timeout is None:
            timeout = -1
        elif timeout > 0:
            timeout = math.ceil(timeout * 1e3) * 1e-3  # never wake before it is due
        ready = []
        conns = self._conns
        for fd, ev in self._ep.poll(timeout, max(len(conns), 1)):
            if fd in conns:
                events = (_READ if ev & _EPOLL_READ else 0) | (_WRITE if ev & _EPOLL_WRITE else 0)
                ready.append((conns[fd], events, bool(ev & select.EPOLLHUP)))
        return ready

    def __len__(self) -> int:
        return len(self._conns)


_EPOLL_READ = (
    getattr(select, "EPOLLIN", 0) | getattr(select, "EPOLLERR", 0) | getattr(select, "EPOLLHUP", 0)
)
_EPOLL_WRITE = (
    getattr(select, "EPOLLOUT", 0) | getattr(select, "EPOLLERR", 0) | getattr(select, "EPOLLHUP", 0)
)


class _Keeper:
    """The thread that does all the I/O of every connection of the process:
    jobs handed to it (connect, adopt, let go), selector events and one
    timer per connection (the session's next wakeup, a connect or a
    hand-back deadline) in a heap.

    It runs nothing but the session's own rules and non-blocking I/O: user
    callbacks run on teller threads and ``on_waiting`` in the acquiring
    thread, so no lock waits for another one's code. A job handed to it
    wakes it only when it sleeps; while it is busy, jobs queue up and are
    taken in one go, and one select() returns the events of many claims.
    """

    def __init__(self) -> None:
        self._poller = _EpollPoller() if hasattr(select, "epoll") else _SelectorPoller()
        self._waker = self._poller.waker()
        self._jobs: deque[tuple[Callable[..., None], tuple[object, ...]]] = deque()
        self._mutex = threading.Lock()
        self._sleeping = False
        self._timers: list[tuple[int, int]] = []
        """Heap of (due, timer id); ids not in _timed are stale."""
        self._timed: dict[int, _Connection] = {}
        self._next_id = 0
        self._wakes: list[Callable[[], None]] = []
        """Wake-ups of waiting threads, held back until the current step
        ends (see wake_later)."""
        self._thread = threading.Thread(target=self._run, name="monolock keeper", daemon=True)
        self._thread.start()
        _tellers.start()  # ready before the first loss, which then waits for no thread start

    # -- any thread ----------------------------------------------------------

    def submit(self, job: Callable[..., None], *args: object) -> None:
        """Have the keeper run ``job(*args)``, in the order handed over."""
        self._jobs.append((job, args))
        with self._mutex:
            wake, self._sleeping = self._sleeping, False
        if wake:
            self._waker.wake()

    def wake_later(self, wake: Callable[[], None]) -> None:
        """Run ``wake`` (which wakes a waiting thread) when the keeper's
        current step ends: after this batch of jobs and timers, or of
        selector events. A thread woken at once would wait for the GIL,
        which the keeper holds, and take it at the keeper's next system
        call, so that the keeper in turn waits for the GIL at every system
        call of the batch: two context switches per hand-over instead of
        none. Off the keeper's thread it wakes at once."""
        if threading.get_ident() == self._thread.ident:
            self._wakes.append(wake)
        else:
            wake()

    def _wake_all(self) -> None:
        """Carry out the wake-ups held back (keeper's thread)."""
        wakes = self._wakes
        if wakes:
            self._wakes = []
            for wake in wakes:
                try:
                    wake()
                except Exception:  # never: one failure must not strand the others
                    logger.exception("monolock keeper: wake-up failed")

    # -- the keeper's thread -------------------------------------------------

    def register(self, conn: _Connection) -> None:
        self._poller.register(conn._fd, conn._events, conn)

    def modify(self, conn: _Connection) -> None:
        self._poller.modify(conn._fd, conn._events, conn)

    def unregister(self, conn: _Connection) -> None:
        """Stop watching a connection whose socket is about to be closed."""
        self._poller.unregister(conn._fd)

    def watch(self, conn: _Connection, due: int | None) -> None:
        """Set (``due``, monotonic ns) or clear (None) the connection's timer."""
        if conn._timer is not None:
            del self._timed[conn._timer]
            conn._timer = None
        if due is None:
            return
        self._next_id += 1
        conn._timer = self._next_id
        self._timed[self._next_id] = conn
        heapq.heappush(self._timers, (due, self._next_id))
        if len(self._timers) > 2 * len(self._timed) + 1024:
            self._timers = [t for t in self._timers if t[1] in self._timed]
            heapq.heapify(self._timers)

    def _run(self) -> None:
        while True:
            try:
                self._turn()
            except Exception:  # never seen; a dead keeper would be far worse
                logger.exception("monolock keeper failed")
                self._wake_all()
                time.sleep(0.001)

    def _turn(self) -> None:
        jobs = self._jobs
        while jobs:
            job, args = jobs.popleft()
            self._call(job, *args)
        for conn in self._due():
            self._call(conn.on_timer)
        self._wake_all()
        with self._mutex:
            if jobs:
                return  # handed over meanwhile: take them first
            self._sleeping = True
        timeout = self._timeout()
        ready = self._poller.poll(timeout)
        if self._sleeping:
            with self._mutex:
                self._sleeping = False
        for owner, mask, hung_up in ready:
            if owner is None:
                self._waker.drain()
            else:
                self._call(owner.on_ready, mask, hung_up)
        self._wake_all()

    def _due(self) -> list[_Connection]:
        """Take the connections whose timer is due."""
        now = time.monotonic_ns()
        due: list[_Connection] = []
        timers, timed = self._timers, self._timed
        while timers:
            at, timer = timers[0]
            conn = timed.get(timer)
            if conn is not None and at > now:
                break
            heapq.heappop(timers)
            if conn is not None:
                del timed[timer]
                conn._timer = None
                due.append(conn)
        return due

    def _timeout(self) -> float | None:
        """Seconds until the next live timer, None without one."""
        timers, timed = self._timers, self._timed
        while timers and timers[0][1] not in timed:
            heapq.heappop(timers)
        if not timers:
            return None
        return min(max(0.0, (timers[0][0] - time.monotonic_ns()) / 1e9), _MAX_SELECT)

    @staticmethod
    def _call(fn: Callable[..., None], *args: object) -> None:
        try:
            fn(*args)
        except Exception as exc:  # a bug in one connection must not stop the others
            owner = getattr(fn, "__self__", None)
            if isinstance(owner, _Connection):
                with suppress(Exception):
                    owner.crash(exc)
            else:
                logger.exception("monolock keeper: %r failed", fn)


_keeper_lock = threading.Lock()
_the_keeper: _Keeper | None = None


def _keeper() -> _Keeper:
    """The process's keeper, started by the first acquisition."""
    global _the_keeper
    keeper = _the_keeper
    if keeper is None:
        with _keeper_lock:
            keeper = _the_keeper
            if keeper is None:
                keeper = _the_keeper = _Keeper()
    return keeper


_forks = 0
"""How many times this process has forked (see _EpollPoller)."""


def _after_fork_in_parent() -> None:
    global _forks
    _forks += 1


def _after_fork_in_child() -> None:
    # No thread of the parent exists in a child: the next acquisition
    # starts a keeper and a teller of its own.
    global _the_keeper, _keeper_lock, _tellers
    _the_keeper = None
    _keeper_lock = threading.Lock()
    _tellers = _Tellers()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)


_HAS_POLL = hasattr(select, "poll")
"""Whether the keeper connects (non-blocking); elsewhere (Windows, where a
refused connect never shows as writable) the caller connects."""
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


_numeric: dict[tuple[str, int], list[SockAddr] | None] = {}
"""Addresses of IP-address hosts, converted once; None for host names."""


def _addresses(address: Address) -> list[SockAddr]:
    """(family, proto, sockaddr) of each address ``address`` stands for. An
    IP address is converted once; a host name is resolved every time, as
    :func:`socket.create_connection` does (in the caller's thread: the
    keeper never blocks)."""
    key = (address.host, address.port)
    found = _numeric.get(key)
    if found is not None:
        return list(found)
    if key not in _numeric:
        try:
            infos = socket.getaddrinfo(
                address.host, address.port, 0, socket.SOCK_STREAM, 0, socket.AI_NUMERICHOST
            )
        except socket.gaierror:
            infos = None
        found = None if infos is None else [(f, p, a) for f, _, p, _, a in infos]
        if len(_numeric) < 1024:
            _numeric[key] = found
        if found is not None:
            return list(found)
    infos = socket.getaddrinfo(address.host, address.port, 0, socket.SOCK_STREAM)
    return [(f, p, a) for f, _, p, _, a in infos]


def _open_socket(config: ClientConfig, address: Address, timeout: float | None) -> socket.socket:
    """Connect (and run the TLS handshake) within ``timeout`` seconds, in
    the caller's thread; returns the socket non-blocking, for the keeper."""
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
            keeper = _keeper()
            session = Session(raw, self.lease_ms, try_only=try_only, server=str(step.address))
            conn = _Connection(keeper, session, on_waiting, on_lost)
            if self.ssl_context is None and _HAS_POLL:
                try:
                    candidates = _addresses(step.address)
                except OSError as exc:
                    raise connect_error(step.address, exc) from exc
                keeper.submit(conn.connect, step.address, candidates, step.connect_timeout)
            else:
                keeper.submit(conn.adopt, _open_socket(self, step.address, step.connect_timeout))
            return conn.acquire(step.deadline, cancel)

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
