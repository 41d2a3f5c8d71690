"""What the sync and asyncio locks share: the lock's public state and the
glue that turns session events into grants, hooks, loss reports and closes."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Generic, Protocol, TypeVar

from . import _constants_gen as spec
from . import _protocol as proto
from ._failure import Failure
from ._log import logger
from ._schedule import HeartbeatSchedule
from ._session import (
    Close,
    Failed,
    Granted,
    Lost,
    Proclaimed,
    Queued,
    Send,
    Session,
    SessionEvent,
)
from .errors import ConnectionClosed, LockLost, LockReleased, MonolockError, unprefixed

LostCallback = Callable[[LockLost], object]
"""Called with the :class:`~monolock.errors.LockLost` error when a lock is lost."""

WaitingCallback = Callable[[str], object]
"""Called with the lock name each time the server queues the claim."""


RELEASE_WAIT_MAX = spec.RELEASE_MAX_WAIT_MS / 1000
"""Longest a release waits for the server to close its end, in seconds."""


class ClaimState(Protocol):
    """What a lock reads of its claim: a claim's own connection
    (:class:`monolock._session.Session`) or a stream of a session
    (:class:`monolock._mux.ClaimStream`), so both are the same lock type."""

    @property
    def name(self) -> str: ...
    @property
    def token(self) -> int | None: ...
    @property
    def schedule(self) -> HeartbeatSchedule: ...
    @property
    def shared(self) -> bool: ...
    @property
    def limit(self) -> int: ...
    @property
    def value(self) -> bytes: ...
    @property
    def valued(self) -> bool: ...
    @property
    def proclaimed(self) -> int: ...
    @property
    def expires_at(self) -> int: ...
    @property
    def loss(self) -> LockLost | None: ...
    @property
    def closed(self) -> bool: ...
    def poll(self, now: int) -> LockLost | None: ...
    def release(self) -> None: ...


def release_wait(session: ClaimState) -> float:
    """How long a release waits for the server's close: the client timeout,
    at most RELEASE_WAIT_MAX."""
    return min(session.schedule.client_timeout_ms / 1000, RELEASE_WAIT_MAX)


def _call_hook(hook: Callable[..., object], *args: object) -> None:
    # A failing user hook must not take the connection down with it.
    try:
        hook(*args)
    except Exception:
        logger.exception("callback %r raised", hook)


class Flag(Protocol):
    """What a lock needs of its ``lost`` event: :class:`threading.Event`
    for the sync API, :class:`asyncio.Event` for asyncio."""

    def set(self) -> None: ...


LostFlag = TypeVar("LostFlag", bound=Flag)


class BaseLock(Generic[LostFlag]):
    """State shared by :class:`monolock.Lock` and :class:`monolock.AsyncLock`;
    they differ in the kind of their ``lost`` event and in how they release.

    The polled members (:attr:`held`, :attr:`is_lost`, :attr:`lost_error`,
    :meth:`check`, :attr:`remaining`) and the push signals (:attr:`lost`,
    the lost callbacks) report one loss decision, taken in the session core
    by whichever looks first once :attr:`valid_until` has passed: a poll
    here, or the connection's own timer.
    """

    def __init__(self, session: ClaimState, lost: LostFlag) -> None:
        assert session.token is not None
        self._session = session
        self._name = session.name
        self._token = session.token
        self._lease_ms = session.schedule.lease_ms
        self._lost = lost
        self._told = False
        self._released = False
        self._callbacks: list[LostCallback] = []
        self._mutex = threading.Lock()

    @property
    def name(self) -> str:
        """The lock name."""
        return self._name

    @property
    def token(self) -> int:
        """The fencing token of this grant (uint64). Pass it to the resource
        the lock guards so that it can refuse a stale holder."""
        return self._token

    @property
    def shared(self) -> bool:
        """Whether this is a shared claim (a shared lock or a semaphore's
        permit), held beside other shared holders."""
        return self._session.shared

    @property
    def limit(self) -> int | None:
        """The semaphore's permits, or ``None`` for an exclusive lock or a
        shared lock with no bound."""
        return self._session.limit or None

    @property
    def value(self) -> bytes | None:
        """The claim's value as sent (UTF-8 for a ``str``): the one it was
        claimed with, then the last one the server acknowledged from
        ``proclaim``; ``None`` for none."""
        return self._session.value or None

    @property
    def lease(self) -> float:
        """The lease of the connection, in seconds."""
        return self._lease_ms / 1000

    @property
    def valid_until(self) -> float:
        """The validity deadline: the ``time.monotonic()`` instant until
        which the lock is safe to use, the send time of the last
        acknowledged request + 0.8 x lease. Moves forward with every
        heartbeat ack; from this instant on the lock is lost, and it stays
        where it was after a loss."""
        return self._session.expires_at / 1e9

    @property
    def remaining(self) -> float:
        """Seconds left until :attr:`valid_until` (0 once passed, lost or
        released)."""
        if not self.held:
            return 0.0
        return max(0.0, (self._session.expires_at - time.monotonic_ns()) / 1e9)

    @property
    def lost_error(self) -> LockLost | None:
        """Why the lock was lost, or ``None`` while it was not. Polled: says
        lost from the :attr:`valid_until` instant on."""
        return self._session.poll(time.monotonic_ns())

    @property
    def is_lost(self) -> bool:
        """Whether the lock is lost. Polled: true from the :attr:`valid_until`
        instant on, even before the ``lost`` event is set."""
        return self.lost_error is not None

    @property
    def lost(self) -> LostFlag:
        """Set when the loss is told (not on release): the push signal, set
        at the deadline on a teller thread of the client (sync) or by the
        event loop (asyncio), before the lost callbacks run and before the
        connection closes."""
        return self._lost

    @property
    def released(self) -> bool:
        """Whether :meth:`release` was called."""
        return self._released

    @property
    def held(self) -> bool:
        """True while the lock is neither lost nor released, i.e. before
        :attr:`valid_until`."""
        return not self._released and self._session.poll(time.monotonic_ns()) is None

    def check(self) -> None:
        """Raise unless the lock is still held: :class:`LockLost` when lost
        (from the :attr:`valid_until` instant on), :class:`LockReleased`
        after :meth:`release`. Call it before each step of the guarded work."""
        loss = self._session.poll(time.monotonic_ns())
        if loss is not None:
            raise loss
        if self._released:
            raise LockReleased(self._name, self._token)

    def add_lost_callback(self, callback: LostCallback) -> None:
        """Call ``callback(error)`` when the loss is told; at once if it
        already was. Not called after :meth:`release`. Callbacks run on a
        teller thread of the client (sync; a busy one holds up no other
        lock's) or on the event loop (asyncio), before the connection is
        closed: keep them short, since the connection of a lost lock closes
        only once they have returned."""
        with self._mutex:
            if not self._told:
                self._callbacks.append(callback)
                return
        error = self._session.loss
        assert error is not None
        _call_hook(callback, error)

    def remove_lost_callback(self, callback: LostCallback) -> None:
        """Forget a callback added by :meth:`add_lost_callback`."""
        with self._mutex:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

    def _proclaim_value(self, value: str | bytes) -> bytes:
        """The wire bytes of a new value, or the error that refuses it
        before anything is sent."""
        if not self._session.valued:
            # Its ACQUIRE was version 1 or 2, whose sessions know no PROCLAIM.
            raise MonolockError(
                f"monolock: lock {self._name!r} was claimed without a value "
                "(use value= to proclaim)"
            )
        raw = proto.encode_value(value)  # ValueTooLong over 1024 bytes
        self.check()
        return raw

    def _proclaim_settled(self, number: int) -> bool:
        """Whether the server has acknowledged PROCLAIM ``number``; raises
        the lock's own error (lost, released) once it ended first."""
        if number and self._session.proclaimed >= number:
            return True
        self.check()
        if not number or self._session.closed:  # ended, yet neither lost nor released
            raise ConnectionClosed(
                f"monolock: lock {self._name!r} (token {self._token}) ended "
                "before the server acknowledged its value"
            )
        return False

    def _mark_released(self) -> bool:
        """Record a release and let the session go; False when it had
        already happened."""
        with self._mutex:
            if self._released:
                return False
            self._session.release()  # no loss is decided from now on
            self._released = True
            self._callbacks.clear()
            return True

    def _tell_lost(self, error: LockLost) -> None:
        """The push side of the loss: the ``lost`` event, then the callbacks."""
        with self._mutex:
            if self._released or self._told:
                return
            self._told = True
            callbacks, self._callbacks = self._callbacks, []
        self._lost.set()
        for callback in callbacks:
            _call_hook(callback, error)

    def __repr__(self) -> str:
        state = "lost" if self.is_lost else "released" if self._released else "held"
        return f"<{type(self).__name__} {self._name!r} token={self._token} {state}>"


HeldLock = TypeVar("HeldLock", bound="BaseLock[Any]")


class ConnectionHandler(Generic[HeldLock]):
    """Carries out a connection's session events, in order.

    The sync and asyncio connections subclass it and supply the I/O
    primitives: writing and closing the transport, telling the waiting
    caller that the outcome is known, and building their kind of lock.
    Since the session returns a loss (:class:`Lost`) before the close that
    may follow it, the application is always told before the socket closes.
    """

    def __init__(
        self,
        session: Session,
        on_waiting: WaitingCallback | None,
        on_lost: LostCallback | None,
    ) -> None:
        self.session = session
        self.lock: HeldLock | None = None
        self.error: MonolockError | None = None
        self._on_waiting = on_waiting
        self._on_lost = on_lost
        self._queued_at: float | None = None

    def _process(self, events: list[SessionEvent]) -> None:
        for event in events:
            if isinstance(event, Send):
                self._write(event.data)
            elif isinstance(event, Queued):
                self._queued_at = time.monotonic()
                logger.debug("acquire %r: queued by %s", self.session.name, self.session.server)
                if self._on_waiting is not None:
                    _call_hook(self._on_waiting, self.session.name)
            elif isinstance(event, Granted):
                logger.debug(
                    "acquire %r: granted by %s, token %d",
                    self.session.name,
                    self.session.server,
                    event.token,
                )
                self.lock = self._make_lock()
                if self._on_lost is not None:
                    self.lock.add_lost_callback(self._on_lost)
                self._outcome_known()
            elif isinstance(event, Lost):
                self._tell(event.error)
            elif isinstance(event, Failed):
                self.error = event.error
                self._outcome_known()
            elif isinstance(event, Close):
                self._close_transport(event.handback)
        if settles_proclaims(events):
            self._wake_proclaimers()

    def _tell(self, error: LockLost) -> None:
        """Tell the application that the lock is lost: the push signals,
        then the log. The sync connection overrides it: its keeper thread
        hands the telling to a teller thread."""
        assert self.lock is not None
        self.lock._tell_lost(error)
        logger.info("%s", unprefixed(error))  # after: the log may be slow

    def failure(self, error: MonolockError) -> Failure:
        """An attempt's failure, with how long the claim had been queued."""
        queued = 0.0 if self._queued_at is None else time.monotonic() - self._queued_at
        return Failure(error, queued)

    @property
    def outcome_known(self) -> bool:
        """Whether the acquisition on this connection has succeeded or failed."""
        return self.lock is not None or self.error is not None

    def _write(self, data: bytes) -> None:
        raise NotImplementedError

    def _close_transport(self, handback: bool) -> None:
        raise NotImplementedError

    def _outcome_known(self) -> None:
        raise NotImplementedError

    def _make_lock(self) -> HeldLock:
        raise NotImplementedError

    def _wake_proclaimers(self) -> None:
        """Have every caller waiting in ``proclaim`` look again."""
        raise NotImplementedError


def settles_proclaims(events: list[SessionEvent]) -> bool:
    """Whether a caller waiting in ``proclaim`` must look again: a PROCLAIM
    was acknowledged, or the lock was lost or closed, so no ack may come."""
    return any(isinstance(event, (Proclaimed, Lost, Close)) for event in events)
