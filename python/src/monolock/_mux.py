"""The protocol state of one session (protocol version 4), without I/O.

A session is one connection that carries many claims, each a *stream*.
:class:`MuxCore` is driven as :class:`monolock._session.Session` is: the
owner (the keeper thread, or the asyncio protocol) feeds it the connection's
start, the bytes received, the passing of time and the connection's end,
and carries out the events returned, in order: :class:`Send`,
:class:`Lost` (tell the application), :class:`Close`; the other events only
say that a caller waiting for a stream may look again. The application's
inputs (:meth:`MuxCore.open`, :meth:`MuxCore.release_stream`,
:meth:`MuxCore.proclaim`, :meth:`MuxCore.close`) only change state and queue
frames: the owner's next :meth:`MuxCore.tick` returns what they made due.

The rules, from docs/protocol.md ("Version 4: sessions"), live here once
for both APIs: one request (SESSION or HEARTBEAT) in flight, on the
heartbeat schedule of the session's lease; every claim is valid until the
send of the last answered request + 0.8 x lease; when that passes, or the
connection ends, or an ERROR's type byte arrives, every held claim is lost,
told before the close; stream ids start at 1 and are never reused; a
claim is released for the client once its RELEASE is handed in.

The core takes an optional ``guard`` (a lock) around every input, since
the sync client calls it from the keeper and from application threads.
Times are ``time.monotonic_ns()`` integers.
"""

from __future__ import annotations

import enum
import time
from collections import deque
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Union

from . import _mux_protocol as mp
from . import _protocol as proto
from . import _watch_protocol as wp
from ._errors_gen import ExpectedAcquire, UnknownMessage
from ._schedule import HeartbeatSchedule
from ._session import Close, Send, client_timeout_text
from ._watch import LockState, WatchCore
from .errors import (
    ConnectionClosed,
    HeartbeatTimeout,
    LockBusy,
    LockLost,
    MonolockError,
    NotMonolock,
    ProtocolViolation,
    ServerError,
    UnsupportedVersion,
    ValueUnsupported,
    error_for_code,
    unprefixed,
)


class MuxPhase(enum.Enum):
    """Where a session stands."""

    IDLE = "idle"
    CONNECTING = "connecting"
    """SESSION sent, no SESSION_OK yet."""
    READY = "ready"
    LOST = "lost"
    """The deadline passed (before SESSION_OK or after): every claim is
    lost; the connection stays open, silent, until the lease has passed or
    the session is closed, so the server cannot hand a claim on while the
    application is told."""
    CLOSED = "closed"


class StreamPhase(enum.Enum):
    """Where one claim stream stands."""

    OPENING = "opening"
    """OPEN handed in, no reply yet."""
    WAITING = "waiting"
    HELD = "held"
    LOST = "lost"
    FAILED = "failed"
    """Ended before a grant: ``error`` says why."""
    RELEASED = "released"
    """RELEASE handed in (or the session ended after it)."""


@dataclass(frozen=True)
class Ready:
    """SESSION_OK arrived: streams may be opened."""

    max_streams: int


@dataclass(frozen=True)
class Changed:
    """A stream moved on (queued, granted, failed, released, proclaimed):
    callers waiting for it look again."""

    stream: int


@dataclass(frozen=True)
class Lost:
    """A held claim is lost: tell the application now, before any
    :class:`Close` that follows."""

    stream: ClaimStream
    error: LockLost


@dataclass(frozen=True)
class Ended:
    """The session is over (``error``: why); a :class:`Close` follows."""

    error: MonolockError


MuxEvent = Union[Send, Ready, Changed, Lost, Ended, Close]


class ClaimStream:
    """One claim of a session, with the members a lock reads
    (:class:`monolock._lock.ClaimState`), so that a claim in a session is
    the same :class:`~monolock.Lock` as a claim on its own connection."""

    def __init__(
        self,
        core: MuxCore,
        stream_id: int,
        name: bytes,
        *,
        shared: bool,
        limit: int,
        value: bytes,
        try_only: bool,
    ) -> None:
        self._core = core
        self.id = stream_id
        self.name = name.decode("utf-8")
        self.shared = shared
        self.limit = limit
        self.value = value
        """The claim's value, then the last acknowledged ON's."""
        self.valued = bool(value)
        self.try_only = try_only
        self.schedule = core.schedule
        self.phase = StreamPhase.OPENING
        self.token: int | None = None
        self.error: MonolockError | None = None
        """Why a claim that was never granted ended."""
        self.loss: LockLost | None = None
        self.released_acked = False
        """RELEASED arrived (or nothing is left to wait for)."""
        self.queued = False
        """The server answered the OPEN with WAITING (it stays set)."""
        self.proclaimed = 0
        self._proclaims = 0
        self._in_flight: deque[tuple[int, bytes]] = deque()
        """ONs sent and not answered yet, in order."""
        self._expires_at: int | None = None
        """Frozen at the loss."""
        self.lock: Any = None
        """The shell's lock object, once granted."""
        self.on_lost: Any = None
        """The caller's lost callback, attached to the lock at the grant."""
        self.term = False
        """Whether the lock is a leader's term (a campaign)."""

    @property
    def expires_at(self) -> int:
        """The claim's validity deadline: the session's, frozen at a loss."""
        return self._core.expires_at if self._expires_at is None else self._expires_at

    @property
    def closed(self) -> bool:
        """Whether the claim neither waits nor holds any more."""
        return self.phase in (StreamPhase.LOST, StreamPhase.FAILED, StreamPhase.RELEASED)

    @property
    def held(self) -> bool:
        """Whether the claim is granted and its loss not decided."""
        return self.phase is StreamPhase.HELD

    @property
    def settled(self) -> bool:
        """Whether an acquisition waiting on this stream has its outcome."""
        return self.phase is not StreamPhase.OPENING and self.phase is not StreamPhase.WAITING

    def poll(self, now: int) -> LockLost | None:
        """The claim's loss, deciding the session's deadline if it passed."""
        self._core.poll(now)
        return self.loss

    def release(self) -> None:
        """Let go (see :meth:`MuxCore.release_stream`)."""
        self._core.release_stream(self)


class WatchStream:
    """One watch of a session: its picture (a :class:`WatchCore`), vouched
    for from its first WATCHING on by the session's answers: each ALIVE
    vouches for it as a WATCHING of its last (epoch, seq) would."""

    def __init__(self, core: MuxCore, stream_id: int, name: bytes) -> None:
        self._core = core
        self.id = stream_id
        self.name = name.decode("utf-8")
        self.watch = WatchCore(core.lease_ms)
        self.vouched = False
        """Whether its first WATCHING has come."""
        self.error: MonolockError | None = None
        """Why the watch ended (a STREAM_END, the session's end)."""
        self.released = False
        self.version = 0
        """Counts the changes of the picture and of its being vouched for."""

    @property
    def closed(self) -> bool:
        """Whether the watch has ended or was released."""
        return self.released or self.error is not None

    def state(self, now: int) -> LockState:
        """The picture at ``now``; known only while the session vouches for it."""
        self._core.poll(now)
        return self.watch.state(now)

    def _end(self, error: MonolockError) -> None:
        self.watch.disconnected()
        if self.error is None and not self.released:
            self.error = error
        self.version += 1


Stream = Union[ClaimStream, WatchStream]


class MuxCore:
    """One session: its lease, its request in flight, its streams."""

    def __init__(
        self,
        lease_ms: int,
        *,
        server: str = "the server",
        guard: AbstractContextManager[Any] | None = None,
    ) -> None:
        self._session_frame = mp.encode_session(lease_ms)
        self.lease_ms = lease_ms
        self.server = server
        self.schedule = HeartbeatSchedule(lease_ms)
        self._guard: AbstractContextManager[Any] = guard or nullcontext()
        self._timeout_ns = round(self.schedule.client_timeout_ms * 1_000_000)
        self._lease_ns = lease_ms * 1_000_000
        self.phase = MuxPhase.IDLE
        self.max_streams = 0
        self.error: MonolockError | None = None
        """Why the session ended."""
        self.streams: dict[int, Stream] = {}
        """Streams the server may still send frames for."""
        self._next_id = 1
        self._decoder = mp.SessionDecoder()
        self._heard = False
        self._last_send = 0
        self._acked_send = 0
        self._in_flight = False
        self._outbox: list[bytes] = []
        self._opened_watches: list[WatchStream] = []
        """Watches whose OPEN goes with the next send: their requests' time."""
        """Frames handed in by the application, sent at the next input."""
        self._events: list[MuxEvent] = []
        """Events decided outside an input (a poll), returned by the next one."""
        self._let_go = False

    # -- inputs from the owner ------------------------------------------------

    def start(self, now: int) -> list[MuxEvent]:
        """The connection is open: send SESSION."""
        with self._guard:
            if self.phase is MuxPhase.CLOSED:
                return self._take()
            if self.phase is not MuxPhase.IDLE:
                raise RuntimeError("session already started")
            self.phase = MuxPhase.CONNECTING
            self._acked_send = now  # the client timeout runs from SESSION
            return [*self._take(), self._send(self._session_frame, now)]

    def receive_data(self, data: bytes, now: int) -> list[MuxEvent]:
        """Process bytes from the server, then what time has made due."""
        with self._guard:
            self._due(now)
            if self.phase is MuxPhase.LOST:
                self._after_loss(data)
            elif self.phase in (MuxPhase.CONNECTING, MuxPhase.READY):
                self._receive(data, now)
                self._send_next(now)
            return self._take()

    def tick(self, now: int) -> list[MuxEvent]:
        """Let time pass; send what the application handed in."""
        with self._guard:
            self._due(now)
            self._send_next(now)
            return self._take()

    def connection_lost(self, exc: BaseException | None = None) -> list[MuxEvent]:
        """The transport ended (EOF, reset, I/O error)."""
        with self._guard:
            if self.phase is MuxPhase.LOST:
                self._close()
            elif self.phase in (MuxPhase.CONNECTING, MuxPhase.READY):
                detail = f": {exc}" if exc else ""
                error = ConnectionClosed(f"monolock: session closed by the server{detail}")
                if exc is not None:
                    error.__cause__ = exc
                self._end(error)
            return self._take()

    # -- inputs from the application ----------------------------------------------

    def open(
        self,
        name: bytes,
        *,
        shared: bool,
        limit: int,
        value: bytes,
        try_only: bool,
        on_lost: Any = None,
        term: bool = False,
    ) -> ClaimStream:
        """Hand in a claim (name and value from :mod:`monolock._protocol`'s
        encoders) and return its stream; the OPEN goes at the next tick.
        Raises the session's end, or :class:`ConnectionClosed` when the
        session is closing or its ids are used up."""
        frame = proto.encode_claim(name, self.lease_ms, shared, limit, value)
        with self._guard:
            self._check_open()
            stream = ClaimStream(
                self, self._next_id, name,
                shared=shared, limit=limit, value=value, try_only=try_only,
            )  # fmt: skip
            stream.on_lost, stream.term = on_lost, term
            self._outbox.append(mp.encode_open(stream.id, frame))
            self.streams[stream.id] = stream
            self._next_id += 1
            return stream

    def open_watch(self, name: bytes) -> WatchStream:
        """Hand in a watch of ``name`` (from :func:`_protocol.encode_name`);
        the OPEN goes at the next tick."""
        with self._guard:
            self._check_open()
            stream = WatchStream(self, self._next_id, name)
            self._outbox.append(mp.encode_open(stream.id, wp.encode_watch(name, self.lease_ms)))
            self._opened_watches.append(stream)
            self.streams[stream.id] = stream
            self._next_id += 1
            return stream

    def release_watch(self, stream: WatchStream) -> None:
        """End a watch: a RELEASE goes at the next tick."""
        with self._guard:
            if stream.closed:
                return
            stream.released = True
            stream.watch.disconnected()
            stream.version += 1
            if self.ready and stream.id in self.streams:
                self._outbox.append(mp.encode_release(stream.id))
            else:
                self.streams.pop(stream.id, None)

    def release_stream(self, stream: ClaimStream) -> None:
        """Let a claim go: from now on it is released for the client and
        no loss of it is told. A RELEASE goes at the next tick if the server
        still has the stream; :attr:`ClaimStream.released_acked` says when
        RELEASED has come (or when there is nothing to wait for)."""
        with self._guard:
            if stream.phase in (StreamPhase.OPENING, StreamPhase.WAITING, StreamPhase.HELD):
                stream.phase = StreamPhase.RELEASED
                if self.ready and stream.id in self.streams:
                    self._outbox.append(mp.encode_release(stream.id))
                    return
            if stream.phase is not StreamPhase.RELEASED or stream.id not in self.streams:
                stream.released_acked = True  # the server has nothing of it left

    def proclaim(self, stream: ClaimStream, value: bytes) -> int:
        """Hand in a new value of a held claim claimed with one; returns its
        number (:attr:`ClaimStream.proclaimed` reaches it at the ack), 0 when
        the claim no longer holds and nothing is sent."""
        if not stream.valued:
            raise RuntimeError("a claim without a value cannot proclaim")
        with self._guard:
            if stream.phase is not StreamPhase.HELD or self.phase is not MuxPhase.READY:
                return 0
            stream._proclaims += 1
            stream._in_flight.append((stream._proclaims, value))
            self._outbox.append(mp.encode_on(stream.id, value))
            return stream._proclaims

    def close(self) -> None:
        """The application closes the session: every claim is released
        (none is told lost); the next tick returns the :class:`Close`."""
        with self._guard:
            self._let_go = True
            for stream in self.streams.values():
                if isinstance(stream, WatchStream):
                    stream.released = True
                    stream._end(ConnectionClosed("monolock: the session was closed"))
                    continue
                if not stream.closed:
                    stream.phase = StreamPhase.RELEASED
                stream.released_acked = True
            if self.phase is MuxPhase.IDLE:
                self.phase = MuxPhase.CLOSED

    def poll(self, now: int) -> MonolockError | None:
        """Decide the deadline's loss if it has passed (the owner's next
        input returns the events); the session's end, if any."""
        with self._guard:
            if self.phase is MuxPhase.READY and not self._let_go and now >= self.expires_at:
                self._timeout()
            return self.error

    # -- outputs --------------------------------------------------------------------

    def next_wakeup(self) -> int | None:
        """When :meth:`tick` must run next, ``None`` once closed."""
        with self._guard:
            if self.phase in (MuxPhase.IDLE, MuxPhase.CLOSED):
                return None
            if self._events or self._let_go or self._outbox:
                return 0
            if self.phase is MuxPhase.LOST:
                return self.close_at
            if self._in_flight:
                return self.expires_at
            return min(self.expires_at, self._next_heartbeat_at())

    @property
    def expires_at(self) -> int:
        """Send of the last answered request + 0.8 x lease."""
        return self._acked_send + self._timeout_ns

    @property
    def close_at(self) -> int:
        """Send of the last answered request + lease: when a lost session closes."""
        return self._acked_send + self._lease_ns

    @property
    def ready(self) -> bool:
        """Whether SESSION_OK has come and the session has not ended."""
        return self.phase is MuxPhase.READY and not self._let_go

    @property
    def closed(self) -> bool:
        """Whether the session has ended."""
        return self.phase is MuxPhase.CLOSED

    @property
    def open_streams(self) -> int:
        """Streams the server counts against max_streams, as far as the
        client knows (ended or released ones are out once the server said so)."""
        return len(self.streams)

    @property
    def ids_left(self) -> int:
        """How many more streams the session can open: ids only grow, so a
        session that has used them all must make way for a new one."""
        return mp.MAX_STREAM_ID - self._next_id + 1

    # -- internals ------------------------------------------------------------------

    def _take(self) -> list[MuxEvent]:
        events, self._events = self._events, []
        return events

    def _check_open(self) -> None:
        if self.error is not None:
            raise self._reraise(self.error)
        if self.phase is not MuxPhase.READY or self._let_go:
            raise ConnectionClosed("monolock: the session is closed")
        if self._next_id > mp.MAX_STREAM_ID:
            raise ConnectionClosed("monolock: the session's stream ids are used up; open another")

    @staticmethod
    def _reraise(error: MonolockError) -> MonolockError:
        """A fresh error for a caller: the session's own, as the cause."""
        again = ConnectionClosed(f"monolock: the session has ended: {unprefixed(error)}")
        again.__cause__ = error
        return again

    def _send(self, frame: bytes, now: int) -> Send:
        self._last_send = now
        self._in_flight = True
        return Send(frame)

    def _next_heartbeat_at(self) -> int:
        return self._last_send + round(self.schedule.interval_ms * 1_000_000)

    def _send_next(self, now: int) -> None:
        if self.phase is not MuxPhase.READY or self._let_go:
            return
        if self._outbox:
            self._events.append(Send(b"".join(self._outbox)))
            self._outbox = []
            for watch in self._opened_watches:
                watch.watch.sent(now)  # the OPEN is the watch's request
            self._opened_watches = []
        if not self._in_flight and now >= self._next_heartbeat_at():
            self._events.append(self._send(proto.HEARTBEAT_FRAME, now))

    def _due(self, now: int) -> None:
        if self._let_go:
            if self.phase is not MuxPhase.CLOSED:
                self._outbox = []
                valid = self.phase is MuxPhase.READY and now < self.expires_at
                self._close(handback=valid)
            return
        if self.phase in (MuxPhase.CONNECTING, MuxPhase.READY) and now >= self.expires_at:
            self._timeout()
        if self.phase is MuxPhase.LOST and now >= self.close_at:
            self._close()

    def _timeout(self) -> None:
        lease_ms = self.lease_ms
        error = HeartbeatTimeout(
            f"monolock: no reply from the server within {client_timeout_text(lease_ms)} ms "
            f"(0.8 x lease of {lease_ms} ms)"
        )
        # As after SESSION_OK: the connection is kept, silent, until the
        # lease has passed (the owner of a session that never became
        # ready, with no claim to protect, may close it at once).
        self._end_streams(error)
        self.phase = MuxPhase.LOST
        self.error = error
        self._outbox = []
        self._events.append(Ended(error))

    def _end_streams(self, error: MonolockError) -> None:
        """Every stream ends with the session: held claims are lost (told
        first), waiting ones fail, released ones count as released."""
        lost: list[MuxEvent] = []
        rest: list[MuxEvent] = []
        for stream in self.streams.values():
            if isinstance(stream, WatchStream):
                stream._end(error)
                rest.append(Changed(stream.id))
            elif stream.phase is StreamPhase.HELD:
                lost.append(self._lose(stream, error))
            elif stream.phase in (StreamPhase.OPENING, StreamPhase.WAITING):
                stream.phase, stream.error = StreamPhase.FAILED, error
                rest.append(Changed(stream.id))
            else:
                stream.released_acked = True
                rest.append(Changed(stream.id))
        self.streams.clear()
        self._events += lost + rest

    def _lose(self, stream: ClaimStream, cause: MonolockError) -> Lost:
        assert stream.token is not None
        stream._expires_at = self.expires_at
        stream.phase = StreamPhase.LOST
        stream.loss = LockLost(stream.name, stream.token, cause)
        return Lost(stream, stream.loss)

    def _end(self, error: MonolockError) -> None:
        """The session ends now: tell, then close."""
        if self.phase is MuxPhase.CONNECTING and isinstance(error, ServerError):
            error = _no_sessions(self.server, error)
        self._end_streams(error)
        self.error = error
        self._events.append(Ended(error))
        self._close()

    def _close(self, *, handback: bool = False) -> None:
        self.phase = MuxPhase.CLOSED
        self._events.append(Close(handback))

    def _after_loss(self, data: bytes) -> None:
        """A lost session reads on but ignores what arrives; an ERROR, the
        server letting go, closes it."""
        try:
            frames = self._decoder.feed(data)
        except ProtocolViolation:
            return
        if any(isinstance(frame, proto.Error) for frame in frames):
            self._close()

    def _receive(self, data: bytes, now: int) -> None:
        if not self._heard and data:
            self._heard = True
            if data[0] not in mp.SERVER_TYPES:
                self._end(NotMonolock(self.server, data))
                return
        try:
            frames = self._decoder.feed(data)
        except ProtocolViolation as exc:
            self._end(exc)
            return
        for frame in frames:
            try:
                self._on_frame(frame, now)
            except ProtocolViolation as exc:
                self._end(exc)
            if self.phase is MuxPhase.CLOSED:
                return

    def _ack(self, now: int) -> None:
        if not self._in_flight:
            raise ProtocolViolation("monolock: server sent a reply nobody asked for")
        self._in_flight = False
        self.schedule.add_rtt_sample((now - self._last_send) / 1_000_000)
        self._acked_send = self._last_send

    def _on_frame(self, frame: mp.SessionFrame, now: int) -> None:
        if isinstance(frame, proto.Error):
            self._end(frame.to_exception())
            return
        if isinstance(frame, mp.SessionOk):
            if self.phase is not MuxPhase.CONNECTING:
                raise ProtocolViolation("monolock: server sent a second SESSION_OK")
            self._ack(now)
            self.phase = MuxPhase.READY
            self.max_streams = frame.max_streams
            self._events.append(Ready(frame.max_streams))
            return
        if self.phase is not MuxPhase.READY:
            raise ProtocolViolation("monolock: server sent a stream frame before SESSION_OK")
        if isinstance(frame, mp.Alive):
            self._ack(now)
            self._vouch_watches()
            return
        stream = self._stream(frame.stream)
        if isinstance(stream, WatchStream):
            self._on_watch_frame(stream, frame, now)
        elif isinstance(frame, mp.Released):
            if stream is None or stream.phase is not StreamPhase.RELEASED:
                raise ProtocolViolation(
                    f"monolock: server sent RELEASED for stream {frame.stream}, never released"
                )
            stream.released_acked = True
            del self.streams[stream.id]
            self._events.append(Changed(stream.id))
        elif isinstance(frame, mp.StreamEnd):
            if stream is not None:
                self._on_stream_end(stream, frame)
        else:
            if stream is None:
                raise ProtocolViolation(
                    f"monolock: server sent a frame of ended stream {frame.stream}"
                )
            self._on_stream(stream, frame.inner)

    def _on_watch_frame(
        self, stream: WatchStream, frame: mp.Stream | mp.Released | mp.StreamEnd, now: int
    ) -> None:
        if isinstance(frame, mp.Released):
            if not stream.released:
                raise ProtocolViolation(
                    f"monolock: server sent RELEASED for stream {frame.stream}, never released"
                )
            del self.streams[stream.id]
        elif isinstance(frame, mp.StreamEnd):
            if not stream.released:  # else crossed our RELEASE, whose RELEASED follows
                del self.streams[stream.id]
                stream._end(frame.to_exception())
                self._events.append(Changed(stream.id))
        else:
            self._on_watch(stream, frame.inner, now)

    def _vouch_watches(self) -> None:
        """An ALIVE vouches for every watch past its first WATCHING as a
        WATCHING of its last (epoch, seq) would, until the heartbeat's send
        + 0.8 x lease."""
        for stream in self.streams.values():
            if isinstance(stream, WatchStream) and stream.vouched and not stream.closed:
                w = stream.watch
                w.sent(self._acked_send)
                w.watching(w.view.epoch, w.view.seq)
                stream.version += 1
                self._events.append(Changed(stream.id))

    def _on_watch(self, stream: WatchStream, inner: object, now: int) -> None:
        if stream.released:
            return  # released for the client: later frames are dropped
        if isinstance(inner, wp.Event):
            stream.watch.event(inner, now)  # a gap raises: the session ends
        elif isinstance(inner, wp.Watching):
            stream.watch.watching(inner.epoch, inner.seq)  # only the first answers
            stream.vouched = True
        else:
            raise ProtocolViolation(
                f"monolock: server sent a claim frame on watch stream {stream.id}"
            )
        stream.version += 1
        self._events.append(Changed(stream.id))

    def _stream(self, stream_id: int) -> Stream | None:
        if not 1 <= stream_id < self._next_id:
            raise ProtocolViolation(f"monolock: server sent a frame of unknown stream {stream_id}")
        return self.streams.get(stream_id)

    def _on_stream_end(self, stream: ClaimStream, frame: mp.StreamEnd) -> None:
        if stream.phase is StreamPhase.RELEASED:
            return  # crossed our RELEASE, whose RELEASED follows
        del self.streams[stream.id]
        error = frame.to_exception()
        if stream.valued and frame.code == UnsupportedVersion.code:
            error = ValueUnsupported(self.server, frame.reason)
        if stream.phase is StreamPhase.HELD:
            self._events.append(self._lose(stream, error))
        else:
            stream.phase, stream.error = StreamPhase.FAILED, error
            self._events.append(Changed(stream.id))

    def _on_stream(self, stream: ClaimStream, inner: object) -> None:
        if not isinstance(inner, (proto.Waiting, proto.Acquired)):
            raise ProtocolViolation(
                f"monolock: server sent a watch frame on claim stream {stream.id}"
            )
        phase = stream.phase
        if phase is StreamPhase.RELEASED:
            return  # released for the client: later frames are dropped
        if phase is StreamPhase.OPENING:
            if isinstance(inner, proto.Waiting):
                if stream.try_only:
                    stream.phase = StreamPhase.RELEASED
                    stream.error = LockBusy(stream.name, shared=stream.shared, limit=stream.limit)
                    self._outbox.append(mp.encode_release(stream.id))
                else:
                    stream.phase = StreamPhase.WAITING
                    stream.queued = True
            else:
                self._grant(stream, inner)
            self._events.append(Changed(stream.id))
            return
        if phase is StreamPhase.WAITING:
            # WAITING answers nothing we sent (no ON while waiting); an
            # ACQUIRED is the promotion.
            if isinstance(inner, proto.Waiting):
                raise ProtocolViolation(
                    f"monolock: server sent WAITING twice on stream {stream.id}"
                )
            self._grant(stream, inner)
            self._events.append(Changed(stream.id))
            return
        # HELD: only the answers to ONs, each with our token.
        if isinstance(inner, proto.Waiting):
            raise ProtocolViolation(f"monolock: server sent WAITING for held stream {stream.id}")
        if inner.token != stream.token:
            raise ProtocolViolation(
                f"monolock: server changed the token of stream {stream.id} "
                f"from {stream.token} to {inner.token}"
            )
        if not stream._in_flight:
            raise ProtocolViolation(
                f"monolock: server sent an answer nobody asked for on stream {stream.id}"
            )
        number, value = stream._in_flight.popleft()
        stream.value, stream.proclaimed = value, number
        self._events.append(Changed(stream.id))

    def _grant(self, stream: ClaimStream, frame: proto.Acquired) -> None:
        stream.phase = StreamPhase.HELD
        stream.token = frame.token


_OLD_SERVER_CODES = (UnsupportedVersion.code, ExpectedAcquire.code, UnknownMessage.code)
"""What a server before version 4 answers SESSION with: a version 3 one
reads 0x05 as an unknown message type (0x13)."""


def _no_sessions(server: str, error: ServerError) -> ServerError:
    """The server's refusal of SESSION, said as what it means; same class
    and code."""
    if error.code not in _OLD_SERVER_CODES:
        return error
    again = error_for_code(error.code, error.reason)
    MonolockError.__init__(
        again,
        f"monolock: server {server} does not support sessions (it answered a protocol "
        f"version 4 SESSION with: {unprefixed(error)}); take claims on their own "
        "connections, or upgrade the server",
    )
    return again


class SessionView:
    """What the blocking and the asyncio session tell of themselves: one
    set of properties over their shared core."""

    _core: MuxCore

    @property
    def max_streams(self) -> int:
        """How many claims the server lets this session have open at once."""
        return self._core.max_streams

    @property
    def open_streams(self) -> int:
        """Claims the server still counts against :attr:`max_streams`."""
        return self._core.open_streams

    @property
    def ids_left(self) -> int:
        """How many more claims this session can open (stream ids are never
        reused); a pool retires a session that has none left."""
        return self._core.ids_left

    @property
    def alive(self) -> bool:
        """Whether claims can still be taken on this session."""
        self._core.poll(time.monotonic_ns())
        return self._core.ready

    @property
    def error(self) -> MonolockError | None:
        """Why the session ended, or ``None``."""
        return self._core.poll(time.monotonic_ns())

    @property
    def server(self) -> str:
        """The server's address."""
        return self._core.server
