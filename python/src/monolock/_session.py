"""The protocol state of one connection, without I/O (sans-IO).

A :class:`Session` is driven by its owner, the sync thread or the asyncio
protocol, with four inputs: the connection is open (:meth:`Session.start`),
bytes received (:meth:`Session.receive_data`), the passing of time
(:meth:`Session.tick`) and the end of the connection
(:meth:`Session.connection_lost`). Each answers with the outputs due, in the
order the owner must carry them out: :class:`Send`, :class:`Queued`,
:class:`Granted`, :class:`Proclaimed`, :class:`Lost`, :class:`Failed`,
:class:`Close`. The owner asks :meth:`Session.next_wakeup` when it must
tick next. The application's inputs are :meth:`Session.release`,
:meth:`Session.poll` and :meth:`Session.proclaim` (a new value, protocol
version 3). Every rule of the protocol that concerns one connection lives
here, once, for both APIs: reply accounting, the heartbeat schedule, the
client timeout, the validity deadline, and the order "tell the loss first,
close later".

A session takes no lock and does no I/O: its owner serializes every call,
as h11's connection asks of its owner. The asyncio client calls it from its
event loop only. The sync client calls it from the keeper thread and from
the application's threads (:meth:`Session.poll`, the lock's polled checks,
and :meth:`Session.release`), through :class:`monolock._serialized.SerializedSession`,
which takes one lock around each call; so a lock held by a sync thread reads
the same single loss decision as the keeper thread, whichever looks first at
the deadline takes it.

Times are ``time.monotonic_ns()`` integers passed in by the caller: whole
nanoseconds keep the deadlines exact (``send + 0.8 x lease`` is reached at
exactly that instant, as in spec/vectors/session.json).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Union

from . import _protocol as proto
from ._connecting import certificate_problem, connect_error
from ._schedule import HeartbeatSchedule
from .errors import (
    ConnectionClosed,
    HeartbeatTimeout,
    LockBusy,
    LockLost,
    MonolockError,
    NotMonolock,
    ProtocolViolation,
    SharedUnsupported,
    UnsupportedVersion,
    ValueUnsupported,
)

_SERVER_MESSAGES = (proto.MSG_WAITING, proto.MSG_ACQUIRED, proto.MSG_ERROR)


def client_timeout_text(lease_ms: int) -> str:
    """0.8 x lease in milliseconds for a message, exactly: a whole number or
    one decimal ("800.8" for 1001), never a float's rounding or an exponent
    (the Go, Node and Rust clients print the same)."""
    whole, tenths = divmod(lease_ms * 8, 10)
    return f"{whole}.{tenths}" if tenths else str(whole)


class Phase(enum.Enum):
    """Where a session stands (the values are the states of
    spec/vectors/session.json)."""

    IDLE = "idle"
    """Created, the connection is not open yet."""
    CONNECTING = "connecting"
    """ACQUIRE sent, no reply yet."""
    WAITING = "waiting"
    """Queued behind the holder."""
    HELD = "held"
    """The lock is granted and valid."""
    LOST = "lost"
    """The lock is lost and the loss decided; the connection stays open
    (no heartbeats) until the application lets go or the lease has passed."""
    CLOSED = "closed"
    """The owner was told to close; nothing more happens."""


@dataclass(frozen=True)
class Send:
    """Write these bytes to the server."""

    data: bytes


@dataclass(frozen=True)
class Queued:
    """The server put the claim in the queue (reply WAITING to ACQUIRE)."""


@dataclass(frozen=True)
class Granted:
    """The lock was granted, at ACQUIRE or by promotion."""

    token: int


@dataclass(frozen=True)
class Proclaimed:
    """The server acknowledged the ``count``-th PROCLAIM handed in (counting
    from 1) and every one before it: a caller waiting for it may return."""

    count: int


@dataclass(frozen=True)
class Lost:
    """The held lock is lost: tell the application now (push signals). The
    connection stays open unless a :class:`Close` follows."""

    error: LockLost


@dataclass(frozen=True)
class Failed:
    """A claim that was never granted ended; a :class:`Close` follows."""

    error: MonolockError


@dataclass(frozen=True)
class Close:
    """Close the connection. ``handback``: a valid lock is being released,
    so the owner may half-close and wait (bounded) for the server's close,
    which tells that the lock is free on the server."""

    handback: bool = False


SessionEvent = Union[Send, Queued, Granted, Proclaimed, Lost, Failed, Close]


class Session:
    """One claim on one lock name over one connection.

    Reply accounting: the server answers every ACQUIRE, HEARTBEAT and
    PROCLAIM with exactly one WAITING or ACQUIRED and sends one extra
    ACQUIRED when it promotes a waiter. At most one request is in flight, so
    a reply is the ack of that request, except an ACQUIRED that arrives
    while WAITING: that is always the promotion, and the ack of an in-flight
    heartbeat (or PROCLAIM) still follows. Taking a promotion for an ack
    would extend validity on the strength of a heartbeat the server has not
    seen.

    Loss: at :attr:`expires_at` with no newer ack, a held lock is lost. The
    loss is decided once (:class:`Lost`, :meth:`poll`), then the session
    stops heartbeating, ignores what arrives and closes at :attr:`close_at`
    or when the application lets go, whichever comes first. Closing at the
    deadline would let the server grant the lock to the next waiter at once
    and throw away the 0.2 x lease margin the deadline exists for. When the
    server ends the connection the loss is told and the connection closed at
    once: the server has already let go.
    """

    def __init__(
        self,
        name: bytes,
        lease_ms: int,
        *,
        try_only: bool = False,
        server: str = "the server",
        shared: bool = False,
        limit: int = 0,
        value: bytes = b"",
    ) -> None:
        self._acquire_frame = proto.encode_claim(name, lease_ms, shared, limit, value)
        self.name = name.decode("utf-8")
        self.shared = shared
        """Whether the claim is shared (a version 2 ACQUIRE, or 3 with a value)."""
        self.limit = limit
        """The semaphore's permits of a shared claim, 0 for no bound."""
        self.value = value
        """The claim's value, ``b""`` for none: the ACQUIRE's, then the last
        acknowledged PROCLAIM's."""
        self.valued = bool(value)
        """Whether the ACQUIRE was version 3, the only kind that may proclaim."""
        self.server = server
        """The server's address, for messages."""
        self.schedule = HeartbeatSchedule(lease_ms)
        self.try_only = try_only
        self.phase = Phase.IDLE
        self.token: int | None = None
        self._timeout_ns = round(self.schedule.client_timeout_ms * 1_000_000)
        self._lease_ns = lease_ms * 1_000_000
        self._decoder = proto.FrameDecoder()
        self._heard = False
        """Whether a byte has come from the server."""
        self._last_send = 0
        """Send time of the latest request (ACQUIRE, HEARTBEAT or PROCLAIM)."""
        self._in_flight = False
        """Whether the latest request still awaits its reply."""
        self._acked_send = 0
        """Send time of the latest acknowledged request (ACQUIRE's until then)."""
        self._loss: LockLost | None = None
        self._told = False
        """Whether a Lost event for ``_loss`` has been returned to the owner."""
        self._let_go = False
        # PROCLAIMs are numbered as handed in; the newest not sent yet waits
        # until nothing is in flight (never two requests in flight), then
        # goes instead of a heartbeat.
        self._proclaims = 0
        """PROCLAIMs handed in."""
        self._pending: _Proclaim | None = None
        """The newest PROCLAIM not sent yet."""
        self._proclaim_in_flight: _Proclaim | None = None
        """The PROCLAIM that the request in flight is, if it is one."""
        self.proclaimed = 0
        """The number of the last acknowledged PROCLAIM (each before it is too)."""

    # -- inputs from the owner ---------------------------------------------

    def start(self, now: int) -> list[SessionEvent]:
        """The connection is open: send ACQUIRE (nothing if already released)."""
        if self.phase is Phase.CLOSED:
            return []
        if self.phase is not Phase.IDLE:
            raise RuntimeError("session already started")
        self.phase = Phase.CONNECTING
        self._acked_send = now  # the client timeout runs from the ACQUIRE
        return [self._send(self._acquire_frame, now)]

    def receive_data(self, data: bytes, now: int) -> list[SessionEvent]:
        """Process bytes from the server, then what time has made due."""
        # Deadlines first: once one has passed, whatever is still in the
        # receive buffer comes too late.
        out = self._due(now)
        if self.phase is Phase.LOST:
            return out + self._after_loss(data)
        if self.phase in (Phase.IDLE, Phase.CLOSED):
            return out
        if not self._heard and data:
            self._heard = True
            if data[0] not in _SERVER_MESSAGES:  # an HTTP port, TLS in plaintext
                return out + self._end(NotMonolock(self.server, data))
        try:
            frames = self._decoder.feed(data)
        except ProtocolViolation as exc:
            return out + self._end(exc)
        for frame in frames:
            out += self._on_frame(frame, now)
            if self.closed:
                return out
        return out + self._send_next(now)

    def tick(self, now: int) -> list[SessionEvent]:
        """Let time pass: the deadline, the close of a lost session, a
        release, a due heartbeat."""
        return self._due(now) + self._send_next(now)

    def connection_lost(self, exc: BaseException | None = None) -> list[SessionEvent]:
        """The transport ended (EOF, reset, I/O error)."""
        out = self._untold()
        if self.phase is Phase.LOST:
            return out + self._close()
        if self.phase in (Phase.IDLE, Phase.CLOSED):
            return out
        error: MonolockError
        if (
            self.phase is Phase.CONNECTING
            and isinstance(exc, OSError)
            and certificate_problem(exc) is not None
        ):
            # TLS 1.3: the server's refusal of this client's certificate
            # comes with the first read, after ACQUIRE went out. The
            # handshake failed after all (tls_certificate_rule).
            error = connect_error(self.server, exc, handshake=True)
        else:
            detail = f": {exc}" if exc else ""
            error = ConnectionClosed(f"monolock: connection closed by the server{detail}")
        if exc is not None:
            error.__cause__ = exc
        return out + self._end(error)

    # -- inputs from the application (release, poll, proclaim) ------------------

    def release(self) -> None:
        """The application lets go (release, cancel, timeout). The owner's
        next :meth:`tick` returns the :class:`Close`; from now on no loss is
        decided."""
        self._let_go = True
        if self.phase is Phase.IDLE:
            self.phase = Phase.CLOSED  # never connected: nothing to close

    def poll(self, now: int) -> LockLost | None:
        """The loss of the lock, deciding it if the deadline has passed,
        whether or not the owner has ticked yet (the owner's next input then
        returns the :class:`Lost`)."""
        if self.phase is Phase.HELD and not self._let_go and now >= self.expires_at:
            self._decide(self._timeout_error())
        return self._loss

    def proclaim(self, value: bytes) -> int:
        """Hand in a new value (checked by :func:`_protocol.encode_value`) of
        a claim whose ACQUIRE was version 3, and return its number:
        :attr:`proclaimed` reaches it once the server has acknowledged it or
        a later one. The owner's next :meth:`tick` sends it if nothing is in
        flight; otherwise it goes right after the reply owed, unless a newer
        value replaces it first. 0: the claim neither waits nor holds (lost,
        let go, ended), and nothing is sent."""
        if not self.valued:
            raise RuntimeError("a claim without a value cannot proclaim")
        if self.phase not in (Phase.WAITING, Phase.HELD) or self._let_go:
            return 0
        self._proclaims += 1
        self._pending = _Proclaim(self._proclaims, value)
        return self._proclaims

    # -- outputs --------------------------------------------------------------

    def next_wakeup(self) -> int | None:
        """When :meth:`tick` must run next, or ``None`` once closed."""
        if self.phase in (Phase.IDLE, Phase.CLOSED):
            return None
        if self._let_go or (self._loss is not None and not self._told):
            return 0  # at once
        if self.phase is Phase.LOST:
            return self.close_at
        if self._in_flight:
            return self.expires_at
        return min(self.expires_at, self._next_heartbeat_at())

    @property
    def expires_at(self) -> int:
        """The validity deadline, ``sendTime(last acknowledged request) +
        0.8 x lease``: from this instant the lock is lost (a waiting claim
        fails). It stays put after a loss."""
        return self._acked_send + self._timeout_ns

    @property
    def close_at(self) -> int:
        """``sendTime(last acknowledged request) + lease``: when a lost
        session closes if the application has not let go before. The server
        cannot have dropped the session earlier."""
        return self._acked_send + self._lease_ns

    @property
    def loss(self) -> LockLost | None:
        """The decided loss, or ``None`` (use :meth:`poll` to look at the
        deadline too)."""
        return self._loss

    @property
    def held(self) -> bool:
        """Whether the lock is granted and its loss not decided."""
        return self.phase is Phase.HELD

    @property
    def closed(self) -> bool:
        """Whether the session has ended."""
        return self.phase is Phase.CLOSED

    # -- internals ---------------------------------------------------------------

    def _next_heartbeat_at(self) -> int:
        if self._pending is not None:
            return self._last_send  # a PROCLAIM goes as soon as nothing is in flight
        return self._last_send + round(self.schedule.interval_ms * 1_000_000)

    def _send(self, frame: bytes, now: int) -> Send:
        self._last_send = now
        self._in_flight = True
        return Send(frame)

    def _timeout_error(self) -> HeartbeatTimeout:
        lease_ms = self.schedule.lease_ms
        return HeartbeatTimeout(
            f"monolock: no reply from the server within {client_timeout_text(lease_ms)} ms "
            f"(0.8 x lease of {lease_ms} ms)"
        )

    def _decide(self, cause: MonolockError) -> None:
        """Decide the loss of a held lock, once."""
        assert self.token is not None
        self.phase = Phase.LOST
        self._loss = LockLost(self.name, self.token, cause)

    def _untold(self) -> list[SessionEvent]:
        """The Lost event of a decided loss, the first time only."""
        if self._loss is None or self._told:
            return []
        self._told = True
        return [Lost(self._loss)]

    def _close(self, *, handback: bool = False) -> list[SessionEvent]:
        self.phase = Phase.CLOSED
        return [Close(handback)]

    def _end(self, error: MonolockError) -> list[SessionEvent]:
        """The claim ends now: tell the loss of a held lock (or the failure
        of a claim), then close."""
        if self.phase is Phase.HELD:
            self._decide(error)
            return self._untold() + self._close()
        return [Failed(error), *self._close()]

    def _due(self, now: int) -> list[SessionEvent]:
        """What the application and the clock have decided: a loss decided
        by a poll is told first; a release closes at once (no loss is
        decided after it); else the deadline, then the lease."""
        out = self._untold()
        if self._let_go:
            if self.phase is not Phase.CLOSED:
                valid = self.phase is Phase.HELD and now < self.expires_at
                out += self._close(handback=valid)
            return out
        if self.phase in (Phase.CONNECTING, Phase.WAITING, Phase.HELD) and now >= self.expires_at:
            if self.phase is Phase.HELD:
                self._decide(self._timeout_error())
                out += self._untold()
            else:
                out += self._end(self._timeout_error())
        if self.phase is Phase.LOST and now >= self.close_at:
            out += self._close()
        return out

    def _send_next(self, now: int) -> list[SessionEvent]:
        """The request that goes when nothing is in flight: a pending
        PROCLAIM at once (it refreshes the lease as a heartbeat does), else
        a heartbeat when one is due."""
        if self.phase not in (Phase.WAITING, Phase.HELD) or self._in_flight:
            return []
        if self._pending is not None:
            self._proclaim_in_flight, self._pending = self._pending, None
            return [self._send(self._proclaim_in_flight.frame, now)]
        if now < self._next_heartbeat_at():
            return []
        return [self._send(proto.HEARTBEAT_FRAME, now)]

    def _after_loss(self, data: bytes) -> list[SessionEvent]:
        """A lost session reads on but ignores what arrives (a late ack
        never revives it); only an ERROR, the server letting go, ends it."""
        try:
            frames = self._decoder.feed(data)
        except ProtocolViolation:
            return []  # the decoder stays stuck: the rest is ignored too
        if any(isinstance(frame, proto.Error) for frame in frames):
            return self._close()
        return []

    def _ack(self, now: int) -> list[SessionEvent]:
        """Take the reply to the request in flight; a PROCLAIM's reply is
        its acknowledgement."""
        if not self._in_flight:
            raise ProtocolViolation("monolock: server sent a reply nobody asked for")
        self._in_flight = False
        self.schedule.add_rtt_sample((now - self._last_send) / 1_000_000)
        self._acked_send = self._last_send
        acked, self._proclaim_in_flight = self._proclaim_in_flight, None
        if acked is None:
            return []
        self.value, self.proclaimed = acked.value, acked.number
        return [Proclaimed(acked.number)]

    def _on_frame(self, frame: proto.Frame, now: int) -> list[SessionEvent]:
        if isinstance(frame, proto.Error):
            if self.valued and frame.code == UnsupportedVersion.code:
                # A server older than version 3: no values there, ever.
                return self._end(ValueUnsupported(self.server, frame.reason))
            if self.shared and frame.code == UnsupportedVersion.code:
                # A version 1 server: no shared claims there, ever.
                return self._end(SharedUnsupported(self.server, frame.reason))
            return self._end(frame.to_exception())
        try:
            return self._on_reply(frame, now)
        except ProtocolViolation as exc:
            return self._end(exc)

    def _on_reply(self, frame: proto.Frame, now: int) -> list[SessionEvent]:
        phase = self.phase
        if phase is Phase.CONNECTING:
            self._ack(now)  # nothing but the ACQUIRE has been sent
            if isinstance(frame, proto.Waiting):
                if self.try_only:
                    return self._end(LockBusy(self.name, shared=self.shared, limit=self.limit))
                self.phase = Phase.WAITING
                return [Queued()]
            return self._grant(frame)
        if phase is Phase.WAITING:
            if isinstance(frame, proto.Waiting):
                return self._ack(now)
            # Always the promotion; an in-flight heartbeat's ack still follows.
            return self._grant(frame)
        # HELD: only heartbeat acks, each with our token.
        if isinstance(frame, proto.Waiting):
            raise ProtocolViolation("monolock: server sent WAITING for a held lock")
        if isinstance(frame, proto.Acquired) and frame.token != self.token:
            raise ProtocolViolation(
                f"monolock: server changed the token from {self.token} to {frame.token}"
            )
        return self._ack(now)

    def _grant(self, frame: proto.Frame) -> list[SessionEvent]:
        assert isinstance(frame, proto.Acquired)
        self.phase = Phase.HELD
        self.token = frame.token
        return [Granted(frame.token)]


@dataclass(frozen=True)
class _Proclaim:
    """A PROCLAIM handed in: its number and its value."""

    number: int
    value: bytes

    @property
    def frame(self) -> bytes:
        return proto.encode_proclaim(self.value)
