"""A watch's core, without I/O and without a clock of its own (the caller
passes ``time.monotonic_ns()`` integers): the picture of one lock name built
from the server's EVENTs, how long it is vouched for, one connection's
requests and replies (:class:`WatchLink`), the reconnection policy
(:class:`WatchRetry`) and the election's reading of the picture
(:func:`leader_of`). The sync and asyncio watches only move bytes and time
through it. spec/vectors/watch.json pins the picture and its validity.

The rules, as the server promises them: every live event is the one after
the last (same epoch, seq + 1), and an epoch changes only with a snapshot;
a picture that breaks that cannot vouch for anything, and its connection
ends. A WATCHING acknowledges the one request in flight (the WATCH, then
each HEARTBEAT) and vouches for the picture until that request's send plus
0.8 x lease, as a lock's acknowledgements do; between connections nothing
is vouched for, and the picture is kept only to resume from its (epoch,
seq).
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field, replace
from typing import Callable

from . import _protocol as proto
from . import _watch_protocol as wp
from ._config import Address, leader_index
from ._errors_gen import NotActive
from ._schedule import Backoff, HeartbeatSchedule
from ._session import client_timeout_text
from .errors import (
    ConnectionClosed,
    HeartbeatTimeout,
    MonolockError,
    ProtocolViolation,
    ServerError,
    WatchTimeout,
)

_NS = 1_000_000_000


def _seconds(ns: int | None) -> float | None:
    return None if ns is None else ns / _NS


@dataclass(frozen=True)
class Holder:
    """One holder of a watched name."""

    token: int
    shared: bool
    limit: int
    identity: str
    """Its certificate identity, or its address when it is anonymous."""
    value: bytes
    held_back_until: float | None = None
    """Set (a ``time.monotonic()`` instant) while the holder's connection is
    gone but the server keeps its place (a reset, a lock delay): it may
    still act until then."""


@dataclass(frozen=True)
class Waiter:
    """One claim in a watched name's queue: a candidate, in an election."""

    arrival: int
    """The claim's arrival number, as in the admin listing."""
    shared: bool
    limit: int
    identity: str
    value: bytes


@dataclass(frozen=True)
class LockState:
    """A watch's picture of its name."""

    known: bool
    """The picture is vouched for now. When false, the rest is the last
    picture that was, and must not be acted on."""
    valid_until: float | None
    """The ``time.monotonic()`` instant the picture stops being vouched for
    (``None``: it is not)."""
    holders: tuple[Holder, ...]
    """In grant order."""
    waiters: tuple[Waiter, ...]
    """In queue order."""
    blocked_until: float | None
    """Nobody is granted the name before this ``time.monotonic()`` instant:
    the server waits out holders it does not know (after a restart or a
    failover)."""
    epoch: int
    seq: int
    """Which event of the name's history the picture includes last."""


class GapError(ProtocolViolation):
    """An event that does not follow the last one: something was missed,
    and the picture cannot vouch for its state."""


class UnaskedError(ProtocolViolation):
    """A WATCHING that answers no request, or vouches for another point of
    the history than the picture's."""


def _holder(e: wp.Event, now: int) -> Holder:
    held_back = _seconds(now + e.ms * 1_000_000) if e.ms else None
    return Holder(e.token, e.mode == proto.MODE_SHARED, e.limit, e.identity, e.value, held_back)


def _waiter(e: wp.Event) -> Waiter:
    return Waiter(e.arrival, e.mode == proto.MODE_SHARED, e.limit, e.identity, e.value)


@dataclass
class View:
    """The state of a name as the events told it (times in ns)."""

    epoch: int = 0
    seq: int = 0
    holders: list[Holder] = field(default_factory=list)
    waiters: list[Waiter] = field(default_factory=list)
    blocked_until: int | None = None
    taken: bool = False
    """A whole snapshot has been taken (it stays so across a resume)."""
    next: View | None = None
    """The snapshot being read, until its end."""

    @property
    def started(self) -> bool:
        """Whether a whole snapshot (or a resume) has been taken."""
        return self.taken and self.next is None

    def resume(self) -> None:
        """Continue from (epoch, seq) of an earlier connection: the server
        sends the events after it, or a snapshot."""
        self.next = None

    def apply(self, e: wp.Event, now: int) -> None:
        """Take one event that arrived at ``now``; raises :class:`GapError`."""
        if self.next is not None:
            self._apply_snapshot(e, now)
        elif e.kind == wp.EVENT_SNAPSHOT:
            blocked = now + e.ms * 1_000_000 if e.ms else None
            self.next = View(e.epoch, e.seq, blocked_until=blocked)
        elif not self.taken or e.epoch != self.epoch or e.seq != self.seq + 1:
            raise GapError(
                f"monolock: watch: an event out of order: epoch {e.epoch} seq {e.seq} "
                f"after epoch {self.epoch} seq {self.seq}"
            )
        else:
            self.seq = e.seq
            self._apply_live(e, now)

    def _apply_snapshot(self, e: wp.Event, now: int) -> None:
        """An event inside a snapshot: its holders and waiters carry the
        snapshot's own (epoch, seq), then its end replaces the picture."""
        n = self.next
        assert n is not None
        if e.epoch != n.epoch or e.seq != n.seq:
            raise GapError("monolock: watch: a snapshot's event numbered apart from it")
        if e.kind == wp.EVENT_HOLDER:
            n.holders.append(_holder(e, now))
        elif e.kind == wp.EVENT_WAITER:
            n.waiters.append(_waiter(e))
        elif e.kind == wp.EVENT_SNAPSHOT_END:
            self.epoch, self.seq = n.epoch, n.seq
            self.holders, self.waiters, self.blocked_until = n.holders, n.waiters, n.blocked_until
            self.taken, self.next = True, None
        else:
            raise GapError(f"monolock: watch: event kind {e.kind} inside a snapshot")

    def _apply_live(self, e: wp.Event, now: int) -> None:
        kind = e.kind
        if kind == wp.EVENT_GRANTED:
            self._drop_waiter(e.arrival)
            self.holders.append(_holder(e, now))
        elif kind == wp.EVENT_VALUE:
            self._change_holder(e.token, lambda h: replace(h, value=e.value))
        elif kind == wp.EVENT_ENDED:
            self.holders = [h for h in self.holders if h.token != e.token]
        elif kind == wp.EVENT_HELD_BACK:
            held = _seconds(now + e.ms * 1_000_000)
            self._change_holder(e.token, lambda h: replace(h, held_back_until=held))
        elif kind == wp.EVENT_QUEUED:
            self._queue(_waiter(e))
        elif kind == wp.EVENT_LEFT:
            self._drop_waiter(e.arrival)
        elif kind == wp.EVENT_BLOCKED:
            until = now + e.ms * 1_000_000
            if self.blocked_until is None or until > self.blocked_until:
                self.blocked_until = until  # a shorter block never shortens it
        else:
            raise GapError(f"monolock: watch: event kind {kind} outside a snapshot")

    def _change_holder(self, token: int, change: Callable[[Holder], Holder]) -> None:
        self.holders = [change(h) if h.token == token else h for h in self.holders]

    def _drop_waiter(self, arrival: int) -> None:
        self.waiters = [w for w in self.waiters if w.arrival != arrival]

    def _queue(self, waiter: Waiter) -> None:
        for i, w in enumerate(self.waiters):
            if w.arrival == waiter.arrival:
                self.waiters[i] = waiter  # a waiter's new value keeps its place
                return
        self.waiters.append(waiter)


class WatchCore:
    """A watch's picture and how long it is vouched for (the Go client's
    ``watchview.Core``)."""

    def __init__(self, lease_ms: int) -> None:
        self.view = View()
        self.timeout_ns = round(HeartbeatSchedule(lease_ms).client_timeout_ms * 1_000_000)
        self.last_send = 0
        self.in_flight = False
        self.valid_until: int | None = None
        """In ns; ``None``: vouched for by nothing."""

    def sent(self, now: int) -> None:
        """A request (WATCH or HEARTBEAT) went out at ``now``."""
        self.last_send, self.in_flight = now, True

    def event(self, e: wp.Event, now: int) -> None:
        """Apply an EVENT that arrived at ``now``. A :class:`GapError`
        leaves the picture vouched for by nothing: the connection must end."""
        try:
            self.view.apply(e, now)
        except GapError:
            self.valid_until = None
            raise

    def watching(self, epoch: int, seq: int) -> None:
        """Take the WATCHING that answers the request in flight: the picture
        is whole up to (epoch, seq), and vouched for until the request's
        send plus 0.8 x lease. Raises :class:`UnaskedError` otherwise."""
        v = self.view
        if not self.in_flight or not v.started or epoch != v.epoch or seq != v.seq:
            self.valid_until = None
            raise UnaskedError(
                "monolock: watch: a WATCHING that does not answer the request in flight: "
                f"epoch {epoch} seq {seq} for the picture at {v.epoch}/{v.seq}"
            )
        self.in_flight = False
        self.valid_until = self.last_send + self.timeout_ns

    def disconnected(self) -> None:
        """The connection ended: nothing in flight, nothing vouched for; the
        picture stays, for a resume from its (epoch, seq)."""
        self.in_flight, self.valid_until = False, None
        self.view.resume()

    def known(self, now: int) -> bool:
        """Whether the picture is vouched for at ``now``."""
        return self.view.started and self.valid_until is not None and now < self.valid_until

    def state(self, now: int) -> LockState:
        """The picture as a :class:`LockState` at ``now``."""
        v = self.view
        return LockState(
            known=self.known(now),
            valid_until=_seconds(self.valid_until),
            holders=tuple(v.holders),
            waiters=tuple(v.waiters),
            blocked_until=_seconds(v.blocked_until),
            epoch=v.epoch,
            seq=v.seq,
        )


class WatchLink:
    """One connection of a watch: the WATCH, then one HEARTBEAT at a time
    on a lock's schedule, each answered by a WATCHING within 0.8 x lease.
    Its inputs return what to send and whether the picture changed; a
    failure raises the error that ends the connection."""

    def __init__(self, core: WatchCore, name: bytes, lease_ms: int) -> None:
        self.core = core
        self.vouched = False
        """Whether the server answered a request on this connection."""
        self._name = name
        self._schedule = HeartbeatSchedule(lease_ms)
        self._decoder = wp.WatchDecoder()
        self._was_known = False

    def start(self, now: int) -> bytes:
        """The connection is open: the WATCH, resuming from the picture."""
        v = self.core.view
        frame = wp.encode_watch(self._name, self._schedule.lease_ms, v.epoch, v.seq)
        self.core.sent(now)
        return frame

    def receive(self, data: bytes, now: int) -> bool:
        """Bytes from the server; whether the picture changed."""
        changed = False
        for frame in self._decoder.feed(data):
            if isinstance(frame, proto.Error):
                raise frame.to_exception()
            if isinstance(frame, wp.Event):
                self.core.event(frame, now)
            else:
                sent = self.core.last_send
                self.core.watching(frame.epoch, frame.seq)
                self._schedule.add_rtt_sample((now - sent) / 1_000_000)
                self.vouched = True
            changed = True
        return self._noticed(now) or changed

    def tick(self, now: int) -> tuple[bytes, bool]:
        """Let time pass: the HEARTBEAT due, if any, and whether the picture
        stopped being vouched for. Raises :class:`HeartbeatTimeout` once the
        request in flight has gone unanswered for 0.8 x lease."""
        changed = self._noticed(now)
        core = self.core
        if core.in_flight and now >= core.last_send + core.timeout_ns:
            lease_ms = self._schedule.lease_ms
            raise HeartbeatTimeout(
                f"monolock: no reply from the server within {client_timeout_text(lease_ms)} ms "
                f"(0.8 x lease of {lease_ms} ms)"
            )
        if not core.in_flight and now >= self._next_heartbeat():
            core.sent(now)
            return proto.HEARTBEAT_FRAME, changed
        return b"", changed

    def next_wakeup(self) -> int:
        """When :meth:`tick` must run next: the reply's deadline or the next
        heartbeat, and the end of the picture's validity (so that it is told)."""
        core = self.core
        due = core.last_send + core.timeout_ns if core.in_flight else self._next_heartbeat()
        if self._was_known and core.valid_until is not None:
            due = min(due, core.valid_until)
        return due

    def _next_heartbeat(self) -> int:
        return self.core.last_send + round(self._schedule.interval_ms * 1_000_000)

    def _noticed(self, now: int) -> bool:
        """Whether being vouched for flipped since the last look."""
        known = self.core.known(now)
        flipped, self._was_known = known != self._was_known, known
        return flipped


class WatchRetry:
    """From one connection to the next (the Go client's ``Watch.run``): the
    servers in turn; a backoff after a failure, reset by a connection the
    server answered on; an HA cell's passive server sends the watch to the
    active one it names at once; a terminal server error ends the watch."""

    def __init__(self, servers: tuple[Address, ...], backoff: Backoff | None = None) -> None:
        self._servers = servers
        self._next = 0
        self._backoff = backoff or Backoff()

    def next_address(self) -> Address:
        address = self._servers[self._next % len(self._servers)]
        self._next += 1
        return address

    def after(self, error: MonolockError, vouched: bool) -> float:
        """Seconds to wait before the next connection, after one that ended
        with ``error``; raises ``error`` when retrying cannot cure it."""
        if vouched:
            self._backoff.reset()
        if isinstance(error, NotActive):
            leader = leader_index(self._servers, error.reason)
            if leader is not None:
                self._next = leader
                return 0.0  # a passive answer is no failure
        elif isinstance(error, ServerError) and not error.temporary:
            raise error
        return self._backoff.next_delay()


def ended_error(exc: BaseException | None) -> MonolockError:
    """The error of a connection that ended under a watch."""
    if isinstance(exc, MonolockError):
        return exc
    detail = f": {exc}" if exc else ""
    error = ConnectionClosed(f"monolock: watch connection closed{detail}")
    error.__cause__ = exc
    return error


def watch_timeout(name: str, cause: MonolockError | None) -> WatchTimeout:
    """The caller's timeout passed before the first picture was vouched for."""
    quoted = json.dumps(name, ensure_ascii=False)
    error = WatchTimeout(f"monolock: timed out waiting for a picture of the lock {quoted}")
    error.__cause__ = cause
    return error


# -- the election's reading -------------------------------------------------------


class LeaderState(enum.Enum):
    """What a follower knows of a name's leader."""

    UNKNOWN = "unknown"
    """The watch cannot vouch for anything now (its server went silent, or
    it is between connections): act on no leader."""
    NO_LEADER = "no leader"
    """Nobody leads, and nobody is held back."""
    LEADER = "leader"
    """The leader is :attr:`Observation.token`, reached by its value."""
    HELD_BACK = "held back"
    """No leader can be elected before :attr:`Observation.until`: a leader
    whose connection went (``token`` set; it may still act), or a restarted
    or failed-over server waiting for leaders it does not know (``token``
    0)."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Observation:
    """What a follower sees of a name's leadership at one moment."""

    state: LeaderState
    token: int = 0
    value: bytes = b""
    identity: str = ""
    until: float | None = None
    """``HELD_BACK``: the ``time.monotonic()`` instant the hold ends."""
    candidates: int = 0
    """How many claims wait to lead after this one."""


def leader_of(state: LockState, now: float) -> Observation:
    """Read a picture as an election at ``now`` (``time.monotonic()``
    seconds): the first holder leads."""
    if not state.known:
        return Observation(LeaderState.UNKNOWN)
    candidates = len(state.waiters)
    if state.holders:
        h = state.holders[0]
        if h.held_back_until is not None:
            return Observation(
                LeaderState.HELD_BACK, h.token, h.value, h.identity, h.held_back_until, candidates
            )
        return Observation(LeaderState.LEADER, h.token, h.value, h.identity, None, candidates)
    if state.blocked_until is not None and state.blocked_until > now:
        return Observation(LeaderState.HELD_BACK, until=state.blocked_until, candidates=candidates)
    return Observation(LeaderState.NO_LEADER, candidates=candidates)


def next_transition(state: LockState, observation: Observation, now: float) -> float:
    """Seconds until the observation can change with no event: its
    validity ends, or a block ends."""
    wait = 3600.0
    if state.known and state.valid_until is not None:
        wait = min(wait, state.valid_until - now)
    if observation.state is LeaderState.HELD_BACK and observation.token == 0:
        assert observation.until is not None
        wait = min(wait, observation.until - now)
    return max(wait, 0.001)
