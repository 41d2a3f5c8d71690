"""The keeper: the one daemon thread that does all the socket I/O of the
blocking client's connections, for every claim of the process at once, from
one poller (epoll, else a selector) and one heap of timers; the teller
threads that tell the losses it finds; and the fork hooks that give a child
process a keeper of its own. It knows nothing of the protocol: it calls each
:class:`Handler` (a connection, see :mod:`monolock._connection`) when its
socket is ready or its timer is due, and runs the jobs handed to it.

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

import heapq
import math
import os
import queue
import select
import selectors
import socket
import threading
import time
from collections import deque
from contextlib import suppress
from typing import Callable

from ._log import logger

# Longest single wait (the keeper's poll, a caller's wait for a note): long
# leases and timeouts wake them up early.
MAX_SELECT = 3600.0

READ = selectors.EVENT_READ
WRITE = selectors.EVENT_WRITE


class Handler:
    """What the keeper serves: one socket and at most one timer. The keeper
    reads ``_fd`` and ``_events`` when (re)registering and owns ``_timer``."""

    _fd: int
    _events: int
    """The selector events the socket is registered for, 0 when not."""
    _timer: int | None
    """The keeper's id of the handler's timer."""

    def on_ready(self, mask: int, hung_up: bool = False) -> None:
        """The socket is ready (``mask``: READ | WRITE; ``hung_up``: closed
        both ways, when the poller knows)."""
        raise NotImplementedError

    def on_timer(self) -> None:
        """The handler's timer is due."""
        raise NotImplementedError

    def crash(self, exc: Exception) -> None:
        """One of the handler's jobs or callbacks raised ``exc``: end it
        visibly; the keeper goes on serving the others."""
        raise NotImplementedError


class Latch:
    """A one-shot signal for any number of waiters, cheaper than an Event:
    a lock that is held until :meth:`open`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self.is_open = False

    def open(self, keeper: Keeper | None = None) -> None:
        """Open it; with ``keeper``, the waiters wake when the keeper's
        current step ends (see :meth:`Keeper.wake_later`)."""
        if not self.is_open:
            self.is_open = True
            if keeper is None:
                self._lock.release()
            else:
                keeper.wake_later(self._lock.release)

    def wait(self) -> None:
        """Return once it is open."""
        if not self.is_open:
            with self._lock:  # each waiter passes it on to the next
                pass


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


def tell(job: Callable[..., None], *args: object) -> None:
    """Run ``job(*args)`` on a teller thread (this process's: see the fork
    hooks below)."""
    _tellers.submit(job, *args)


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
        self.register(waker.reader.fileno(), READ, None)
        return waker

    def __init__(self) -> None:
        self._sel = selectors.DefaultSelector()

    def register(self, fd: int, events: int, conn: Handler | None) -> None:
        self._sel.register(fd, events, conn)

    def modify(self, fd: int, events: int, conn: Handler) -> None:
        self._sel.modify(fd, events, conn)

    def unregister(self, fd: int) -> None:
        """Stop watching ``fd``, which is about to be closed."""
        with suppress(KeyError, ValueError):
            self._sel.unregister(fd)

    def poll(self, timeout: float | None) -> list[tuple[Handler | None, int, bool]]:
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
        self._conns: dict[int, Handler | None] = {}
        self._born: dict[int, int] = {}
        """The fork count when each descriptor was registered."""

    def waker(self) -> _Waker | _EventFdWaker:
        if not hasattr(os, "eventfd"):  # Python < 3.10
            waker = _Waker()
            self.register(waker.reader.fileno(), READ, None)
            return waker
        efd = _EventFdWaker()
        self._ep.register(efd.fd, select.EPOLLIN | select.EPOLLET)
        self._conns[efd.fd] = None
        return efd

    @staticmethod
    def _mask(events: int) -> int:
        return (select.EPOLLIN if events & READ else 0) | (select.EPOLLOUT if events & WRITE else 0)

    def register(self, fd: int, events: int, conn: Handler | None) -> None:
        self._ep.register(fd, self._mask(events))
        self._conns[fd] = conn
        self._born[fd] = _forks

    def modify(self, fd: int, events: int, conn: Handler) -> None:
        self._ep.modify(fd, self._mask(events))

    def unregister(self, fd: int) -> None:
        """Stop watching ``fd``, which is about to be closed."""
        if self._conns.pop(fd, None) is not None and self._born.pop(fd) != _forks:
            with suppress(OSError):
                self._ep.unregister(fd)  # a child may share it: the close would not

    def poll(self, timeout: float | None) -> list[tuple[Handler | None, int, bool]]:
        """(connection, selector events, hung up) of each ready socket."""
        if timeout is None:
            timeout = -1
        elif timeout > 0:
            timeout = math.ceil(timeout * 1e3) * 1e-3  # never wake before it is due
        ready = []
        conns = self._conns
        for fd, ev in self._ep.poll(timeout, max(len(conns), 1)):
            if fd in conns:
                events = (READ if ev & _EPOLL_READ else 0) | (WRITE if ev & _EPOLL_WRITE else 0)
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


class Keeper:
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
        self._timed: dict[int, Handler] = {}
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

    def register(self, conn: Handler) -> None:
        self._poller.register(conn._fd, conn._events, conn)

    def modify(self, conn: Handler) -> None:
        self._poller.modify(conn._fd, conn._events, conn)

    def unregister(self, conn: Handler) -> None:
        """Stop watching a connection whose socket is about to be closed."""
        self._poller.unregister(conn._fd)

    def watch(self, conn: Handler, due: int | None) -> None:
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

    def _due(self) -> list[Handler]:
        """Take the connections whose timer is due."""
        now = time.monotonic_ns()
        due: list[Handler] = []
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
        return min(max(0.0, (timers[0][0] - time.monotonic_ns()) / 1e9), MAX_SELECT)

    @staticmethod
    def _call(fn: Callable[..., None], *args: object) -> None:
        try:
            fn(*args)
        except Exception as exc:  # a bug in one connection must not stop the others
            owner = getattr(fn, "__self__", None)
            if isinstance(owner, Handler):
                with suppress(Exception):
                    owner.crash(exc)
            else:
                logger.exception("monolock keeper: %r failed", fn)


_keeper_lock = threading.Lock()
_the_keeper: Keeper | None = None


def keeper() -> Keeper:
    """The process's keeper, started by the first acquisition."""
    global _the_keeper
    the = _the_keeper
    if the is None:
        with _keeper_lock:
            the = _the_keeper
            if the is None:
                the = _the_keeper = Keeper()
    return the


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
