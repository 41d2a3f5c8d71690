"""What the sync and asyncio locks share: the lock's public state and the
glue that turns session events into grants, hooks and loss reports."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Generic, Protocol, TypeVar

from ._session import Failed, Granted, Queued, Session, SessionEvent
from .errors import HeartbeatTimeout, LockLost, LockReleased, MonolockError

logger = logging.getLogger("monolock")

LostCallback = Callable[[LockLost], object]
"""Called with the :class:`~monolock.errors.LockLost` error when a lock is lost."""

WaitingCallback = Callable[[str], object]
"""Called with the lock name each time the server queues the claim."""


RELEASE_WAIT_MAX = 1.0
"""Longest a release waits for the server to close its end, in seconds."""


def release_wait(session: Session) -> float:
    """How long a release waits for the server's close: the client timeout,
    at most RELEASE_WAIT_MAX."""
    return min(session.schedule.client_timeout_ms / 1000, RELEASE_WAIT_MAX)


def _call_hook(hook: Callable[..., object], *args: object) -> None:
    # A failing user hook must not take the heartbeat down with it.
    try:
        hook(*args)
    except Exception:
        logger.exception("monolock: callback %r raised", hook)


class Flag(Protocol):
    """What a lock needs of its ``lost`` event: :class:`threading.Event`
    for the sync API, :class:`asyncio.Event` for asyncio."""

    def set(self) -> None: ...


LostFlag = TypeVar("LostFlag", bound=Flag)


class BaseLock(Generic[LostFlag]):
    """State shared by :class:`monolock.Lock` and :class:`monolock.AsyncLock`;
    they differ in the kind of their ``lost`` event and in how they release."""

    def __init__(
        self, name: str, token: int, lease_ms: int, valid_until: float, lost: LostFlag
    ) -> None:
        self._name = name
        self._token = token
        self._lease_ms = lease_ms
        self._valid_until = valid_until
        self._lost = lost
        self._lost_error: LockLost | None = None
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
    def lease(self) -> float:
        """The lease of the connection, in seconds."""
        return self._lease_ms / 1000

    @property
    def valid_until(self) -> float:
        """The ``time.monotonic()`` instant until which the lock is safe to
        use: send time of the last acknowledged request + 0.8 x lease. Moves
        forward with every heartbeat ack."""
        return self._valid_until

    @property
    def remaining(self) -> float:
        """Seconds left until :attr:`valid_until` (0 once passed, lost or
        released)."""
        if not self.held:
            return 0.0
        return max(0.0, self._valid_until - time.monotonic())

    @property
    def lost_error(self) -> LockLost | None:
        """Why the lock was lost, or ``None`` while it was not."""
        return self._lost_error

    @property
    def lost(self) -> LostFlag:
        """Set once the lock is lost (not on release)."""
        return self._lost

    @property
    def released(self) -> bool:
        """Whether :meth:`release` was called."""
        return self._released

    @property
    def held(self) -> bool:
        """True while the lock is neither lost nor released and its validity
        deadline has not passed."""
        return (
            self._lost_error is None and not self._released and time.monotonic() < self._valid_until
        )

    def check(self) -> None:
        """Raise unless the lock is still held: :class:`LockLost` when lost
        (also when the validity deadline passed and the loss is not reported
        yet), :class:`LockReleased` after :meth:`release`. Call it before
        each step of the guarded work."""
        if self._lost_error is not None:
            raise self._lost_error
        if self._released:
            raise LockReleased(self._name, self._token)
        if time.monotonic() >= self._valid_until:
            raise LockLost(
                self._name,
                self._token,
                HeartbeatTimeout("monolock: validity deadline passed without a heartbeat ack"),
            )

    def add_lost_callback(self, callback: LostCallback) -> None:
        """Call ``callback(error)`` when the lock is lost; at once if it
        already is. Not called after :meth:`release`. Callbacks run on the
        heartbeat thread (sync) or the event loop (asyncio): keep them short
        and never block in them."""
        with self._mutex:
            if self._lost_error is None:
                self._callbacks.append(callback)
                return
            error = self._lost_error
        _call_hook(callback, error)

    def remove_lost_callback(self, callback: LostCallback) -> None:
        """Forget a callback added by :meth:`add_lost_callback`."""
        with self._mutex:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

    def _mark_released(self) -> bool:
        """Record a release; False when it had already happened."""
        with self._mutex:
            if self._released:
                return False
            self._released = True
            self._callbacks.clear()
            return True

    def _mark_lost(self, cause: MonolockError) -> None:
        with self._mutex:
            if self._released or self._lost_error is not None:
                return
            error = self._lost_error = LockLost(self._name, self._token, cause)
            callbacks, self._callbacks = self._callbacks, []
        self._lost.set()
        for callback in callbacks:
            _call_hook(callback, error)

    def __repr__(self) -> str:
        state = "lost" if self._lost_error else "released" if self._released else "held"
        return f"<{type(self).__name__} {self._name!r} token={self._token} {state}>"


HeldLock = TypeVar("HeldLock", bound="BaseLock[Any]")


class ConnectionHandler(Generic[HeldLock]):
    """Feeds a connection's session events to the user-facing objects.

    The sync and asyncio connections subclass it and supply the I/O
    primitives: writing and closing the transport, telling the waiting
    caller that the outcome is known, and building their kind of lock.
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

    def _process(self, events: list[SessionEvent]) -> None:
        """Send what the session queued, then act on its events."""
        data = self.session.data_to_send()
        if data:
            self._write(data)
        if self.lock is not None:
            self.lock._valid_until = self.session.expires_at
        for event in events:
            if isinstance(event, Queued):
                if self._on_waiting is not None:
                    _call_hook(self._on_waiting, self.session.name)
            elif isinstance(event, Granted):
                self.lock = self._grant(event.token)
                self._outcome_known()
            elif isinstance(event, Failed):
                # Close first, then tell: a lock reported lost is gone.
                self._close_transport()
                if self.lock is not None:
                    self.lock._mark_lost(event.error)
                else:
                    self.error = event.error
                    self._outcome_known()

    def _grant(self, token: int) -> HeldLock:
        lock = self._make_lock(token, self.session.expires_at)
        if self._on_lost is not None:
            lock.add_lost_callback(self._on_lost)
        return lock

    @property
    def outcome_known(self) -> bool:
        """Whether the acquisition on this connection has succeeded or failed."""
        return self.lock is not None or self.error is not None

    def _write(self, data: bytes) -> None:
        raise NotImplementedError

    def _close_transport(self) -> None:
        raise NotImplementedError

    def _outcome_known(self) -> None:
        raise NotImplementedError

    def _make_lock(self, token: int, valid_until: float) -> HeldLock:
        raise NotImplementedError
