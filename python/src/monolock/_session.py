"""The protocol state of one connection, without I/O (sans-IO).

A :class:`Session` is driven by its owner, the sync thread or the asyncio
protocol, with three inputs: bytes received (:meth:`Session.receive_data`),
the passing of time (:meth:`Session.tick`) and the end of the connection
(:meth:`Session.connection_lost`). It answers with events and with bytes to
send (:meth:`Session.data_to_send`), and tells when it next needs the clock
(:meth:`Session.next_wakeup`). Every rule of the protocol that concerns one
connection lives here, once, for both APIs: reply accounting, the heartbeat
schedule, the client timeout and the validity deadline.

Times are ``time.monotonic()`` seconds passed in by the caller.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Union

from . import _protocol as proto
from ._schedule import HeartbeatSchedule
from .errors import (
    ConnectionClosed,
    HeartbeatTimeout,
    LockBusy,
    MonolockError,
    ProtocolViolation,
)


class Phase(enum.Enum):
    """Where a session stands."""

    IDLE = "idle"
    """Created, ACQUIRE not sent yet."""
    PENDING = "pending"
    """ACQUIRE sent, no reply yet."""
    WAITING = "waiting"
    """Queued behind the holder."""
    HELD = "held"
    """The lock is granted."""
    CLOSED = "closed"
    """Failed or closed by the owner; nothing more happens."""


@dataclass(frozen=True)
class Queued:
    """The server put the claim in the queue (reply WAITING to ACQUIRE)."""


@dataclass(frozen=True)
class Granted:
    """The lock was granted, at ACQUIRE or by promotion."""

    token: int


@dataclass(frozen=True)
class Failed:
    """The session ended. The owner must close the connection."""

    error: MonolockError


SessionEvent = Union[Queued, Granted, Failed]


class Session:
    """One claim on one lock name over one connection.

    Reply accounting: the server answers every ACQUIRE and HEARTBEAT with
    exactly one WAITING or ACQUIRED and sends one extra ACQUIRED when it
    promotes a waiter. At most one request is in flight, so a reply is the
    ack of that request, except an ACQUIRED that arrives while WAITING: that
    is always the promotion, and the ack of an in-flight heartbeat still
    follows. Taking a promotion for an ack would extend validity on the
    strength of a heartbeat the server has not seen.
    """

    def __init__(self, name: bytes, lease_ms: int, *, try_only: bool = False) -> None:
        self._acquire_frame = proto.encode_acquire(name, lease_ms)
        self.name = name.decode("utf-8")
        self.schedule = HeartbeatSchedule(lease_ms)
        self.try_only = try_only
        self.phase = Phase.IDLE
        self.token: int | None = None
        self._timeout_s = self.schedule.client_timeout_ms / 1000
        self._decoder = proto.FrameDecoder()
        self._outbox = bytearray()
        self._last_send = 0.0
        """Send time of the latest ACQUIRE or HEARTBEAT."""
        self._in_flight = False
        """Whether the latest request still awaits its reply."""
        self._acked_send = 0.0
        """Send time of the latest acknowledged request (ACQUIRE's until then)."""

    # -- inputs ---------------------------------------------------------

    def start(self, now: float) -> None:
        """Queue the ACQUIRE frame; the connection has just been opened."""
        if self.phase is not Phase.IDLE:
            raise RuntimeError("session already started")
        self.phase = Phase.PENDING
        self._send(self._acquire_frame, now)
        self._acked_send = now  # the client timeout runs from the ACQUIRE

    def receive_data(self, data: bytes, now: float) -> list[SessionEvent]:
        """Process bytes from the server."""
        if self.phase in (Phase.IDLE, Phase.CLOSED):
            return []
        # Give up first: once the deadline has passed the lock is gone,
        # whatever is still sitting in the receive buffer.
        expired = self._check_expiry(now)
        if expired:
            return expired
        try:
            frames = self._decoder.feed(data)
        except ProtocolViolation as exc:
            return self._fail(exc)
        events: list[SessionEvent] = []
        for frame in frames:
            events.extend(self._on_frame(frame, now))
            if self.closed:
                break
        events.extend(self.tick(now))
        return events

    def tick(self, now: float) -> list[SessionEvent]:
        """Let time pass: fail on the client timeout, send a due heartbeat."""
        if self.phase in (Phase.IDLE, Phase.CLOSED):
            return []
        expired = self._check_expiry(now)
        if expired:
            return expired
        if not self._in_flight and now >= self._next_heartbeat_at():
            self._send(proto.HEARTBEAT_FRAME, now)
        return []

    def connection_lost(self, exc: BaseException | None = None) -> list[SessionEvent]:
        """The transport ended (EOF, reset, I/O error)."""
        if self.phase in (Phase.IDLE, Phase.CLOSED):
            return []
        detail = f": {exc}" if exc else ""
        error = ConnectionClosed(f"monolock: connection closed by the server{detail}")
        if exc is not None:
            error.__cause__ = exc
        return self._fail(error)

    def close(self) -> None:
        """The owner closes the connection (release, cancel). No events."""
        self.phase = Phase.CLOSED
        self._outbox.clear()

    # -- outputs --------------------------------------------------------

    def data_to_send(self) -> bytes:
        """Take the bytes queued for the server."""
        data = bytes(self._outbox)
        self._outbox.clear()
        return data

    def next_wakeup(self) -> float | None:
        """When :meth:`tick` must run next, or ``None`` once closed."""
        if self.phase in (Phase.IDLE, Phase.CLOSED):
            return None
        if self._in_flight:
            return self.expires_at
        return min(self.expires_at, self._next_heartbeat_at())

    @property
    def expires_at(self) -> float:
        """``sendTime(last acknowledged request) + 0.8 * lease``: past this
        the session counts as dead. While held, the lock's validity."""
        return self._acked_send + self._timeout_s

    @property
    def held(self) -> bool:
        """Whether the lock is granted and the session still open."""
        return self.phase is Phase.HELD

    @property
    def closed(self) -> bool:
        """Whether the session has ended."""
        return self.phase is Phase.CLOSED

    # -- internals ------------------------------------------------------

    def _next_heartbeat_at(self) -> float:
        return self._last_send + self.schedule.interval_ms / 1000

    def _send(self, frame: bytes, now: float) -> None:
        self._outbox += frame
        self._last_send = now
        self._in_flight = True

    def _check_expiry(self, now: float) -> list[SessionEvent]:
        if now < self.expires_at:
            return []
        lease_ms = self.schedule.lease_ms
        return self._fail(
            HeartbeatTimeout(
                f"monolock: no reply from the server within {self.schedule.client_timeout_ms:g} ms "
                f"(0.8 x lease of {lease_ms} ms)"
            )
        )

    def _ack(self, now: float) -> None:
        if not self._in_flight:
            raise ProtocolViolation("monolock: server sent a reply nobody asked for")
        self._in_flight = False
        self.schedule.add_rtt_sample((now - self._last_send) * 1000)
        self._acked_send = self._last_send

    def _on_frame(self, frame: proto.Frame, now: float) -> list[SessionEvent]:
        if isinstance(frame, proto.Error):
            return self._fail(frame.to_exception())
        try:
            return self._on_reply(frame, now)
        except ProtocolViolation as exc:
            return self._fail(exc)

    def _on_reply(self, frame: proto.Frame, now: float) -> list[SessionEvent]:
        phase = self.phase
        if phase is Phase.PENDING:
            self._ack(now)
            if isinstance(frame, proto.Waiting):
                if self.try_only:
                    return self._fail(LockBusy(self.name))
                self.phase = Phase.WAITING
                return [Queued()]
            return self._grant(frame)
        if phase is Phase.WAITING:
            if isinstance(frame, proto.Waiting):
                self._ack(now)
                return []
            # Always the promotion; an in-flight heartbeat's ack still follows.
            return self._grant(frame)
        # HELD: only heartbeat acks, each with our token.
        if isinstance(frame, proto.Waiting):
            raise ProtocolViolation("monolock: server sent WAITING for a held lock")
        if isinstance(frame, proto.Acquired) and frame.token != self.token:
            raise ProtocolViolation(
                f"monolock: server changed the token from {self.token} to {frame.token}"
            )
        self._ack(now)
        return []

    def _grant(self, frame: proto.Frame) -> list[SessionEvent]:
        assert isinstance(frame, proto.Acquired)
        self.phase = Phase.HELD
        self.token = frame.token
        return [Granted(frame.token)]

    def _fail(self, error: MonolockError) -> list[SessionEvent]:
        self.close()
        return [Failed(error)]
