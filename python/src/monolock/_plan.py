"""The acquisition policy, written once for both APIs.

:func:`acquisition_plan` is a generator that yields the I/O steps to take
(:class:`Attempt`, :class:`Sleep`) and receives their results; the sync
client runs it with blocking calls, the asyncio client with awaits
(:func:`run_sync` here, ``_run_async`` in :mod:`monolock.aio`). The rules
live only here: which failures are retried, server order, backoff, and the
caller's deadline.
"""

from __future__ import annotations

import json
import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Callable, TypeVar, Union

from . import _protocol as proto
from ._config import Address, ClientConfig, check_timeout, leader_index
from ._errors_gen import NotActive
from ._failure import Failure
from ._log import logger
from ._schedule import RETRY_RESET_AFTER_QUEUED_MS, Backoff
from ._session import Session
from .errors import (
    PREFIX,
    AcquireTimeout,
    ConnectError,
    ConnectionClosed,
    HeartbeatTimeout,
    MonolockError,
    NotMonolock,
    ProtocolViolation,
    ServerError,
    unprefixed,
)

L = TypeVar("L")


@dataclass(frozen=True)
class Attempt:
    """Connect to ``address`` within ``connect_timeout`` seconds, send
    ACQUIRE and wait for the grant until ``deadline`` (monotonic seconds,
    ``None``: no limit).

    The executor returns the lock, or a :class:`Failure` (or raises) with
    :class:`ConnectError` when the connection could not be made,
    :class:`AcquireTimeout` at the deadline, :class:`AcquireCancelled`, else
    the session's error. On any failure it leaves the connection closed.
    """

    address: Address
    connect_timeout: float | None
    deadline: float | None


@dataclass(frozen=True)
class Sleep:
    """Wait ``seconds`` before the next attempt."""

    seconds: float


Step = Union[Attempt, Sleep]

# Errors after which a waiting acquisition re-queues on a new connection,
# provided they are temporary.
_REQUEUE = (ServerError, ConnectionClosed, HeartbeatTimeout, ProtocolViolation)


def leaves_rotation(error: MonolockError) -> bool:
    """Whether the server that failed with ``error`` answers the same way
    next time, so that the acquisition does not ask it again (the retry
    plan's outcome not_monolock): it does not speak monolock, or a
    certificate was refused."""
    return isinstance(error, NotMonolock) or (
        isinstance(error, ConnectError) and error.certificate is not None
    )


def timeout_error(name: str, last: MonolockError | None = None) -> AcquireTimeout:
    """The caller's deadline passed. ``last`` is the last attempt's failure
    when that attempt did not reach the lock; the message quotes it, so that
    a server that is down does not read as a busy lock."""
    # In the words of every client (spec/vectors/messages.json): the name
    # in double quotes, as Go, Node and Rust quote it.
    text = f"monolock: timed out waiting for the lock {json.dumps(name, ensure_ascii=False)}"
    if last is not None:
        text += f" (last attempt: {unprefixed(last)})"
    error = AcquireTimeout(text)
    error.__cause__ = last
    return error


@dataclass(frozen=True)
class Claim:
    """What one acquisition asks for, checked: the name's wire bytes,
    whether the claim is shared, with at most ``limit`` holders (0: no
    bound), and its value's wire bytes (``b""``: none)."""

    name: bytes
    shared: bool = False
    limit: int = 0
    value: bytes = b""

    def session(
        self, lease_ms: int, *, try_only: bool, server: str, core: type[Session] = Session
    ) -> Session:
        """A new session core for one attempt of this claim at ``server``
        (``core``: the sync client's :class:`SerializedSession`)."""
        return core(
            self.name,
            lease_ms,
            try_only=try_only,
            server=server,
            shared=self.shared,
            limit=self.limit,
            value=self.value,
        )


def check_mode(shared: bool, limit: int | None) -> tuple[bool, int]:
    """The mode of a caller's claim: ``limit`` (a semaphore's permits, 1 to
    65535) makes it shared; ``shared`` alone is shared with no bound.
    Raises :class:`~monolock.errors.InvalidMode` (0x19) for another limit."""
    if not isinstance(shared, bool):
        raise TypeError(f"monolock: shared must be True or False, not {type(shared).__name__}")
    if limit is None:
        return shared, 0
    return True, proto.validate_semaphore_limit(limit)


def prepare_acquisition(
    config: ClientConfig,
    name: str | bytes,
    timeout: float | None,
    *,
    try_only: bool,
    shared: bool = False,
    limit: int | None = None,
    value: str | bytes | None = None,
) -> tuple[Claim, Generator[Step, L | Failure | None, L]]:
    """Check a caller's ``acquire`` arguments and plan the acquisition:
    returns the claim and the plan. Invalid modes, names, values and
    timeouts raise here, before any byte is sent, in the server's order (the
    lease was checked when the client was built); the timeout starts now."""
    shared, limit_n = check_mode(shared, limit)
    raw = proto.encode_name(name)
    raw_value = proto.encode_value(value)
    timeout = check_timeout(timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    plan: Generator[Step, L | Failure | None, L] = acquisition_plan(
        config, deadline, try_only=try_only, name=raw.decode("utf-8")
    )
    return Claim(raw, shared, limit_n, raw_value), plan


def acquisition_plan(
    config: ClientConfig,
    deadline: float | None,
    *,
    try_only: bool,
    name: str = "",
    clock: Callable[[], float] = time.monotonic,
    backoff: Backoff | None = None,
) -> Generator[Step, L | Failure | None, L]:
    """Yield the steps of one acquisition of the lock ``name`` and return
    the lock.

    The retry policy of spec/constants.json (``retry``), the same in every
    client. One cursor walks the server list, wrapping around, and moves to
    the next server after any failed attempt. A server that cannot be
    reached is followed by the next attempt at once, unless every server has
    failed to connect since the last sleep; a server that answered and then
    failed the claim (a temporary error, a dropped connection, the client
    timeout while waiting) is always followed by a backoff sleep. A server
    that does not speak monolock (:class:`NotMonolock`), or whose TLS
    handshake failed on a certificate (a :class:`ConnectError` with
    ``certificate`` set), leaves the walk for good and the next one is
    tried at once; with none left, its error goes to the caller. The
    backoff starts again after an attempt that had been queued for at least
    ``RETRY_RESET_AFTER_QUEUED_MS``: that server was healthy. A passive
    server of an HA cell (:class:`NotActive`, 0x03) starts the backoff over:
    a pause of the first delay only, then the server its reason names when
    that is one of ``config.servers`` still in the walk, else the next one.
    A try-acquisition makes one pass and never sleeps: an unreachable server
    or a temporary error (0x03 included) moves it on to the next server, and
    the last error goes to the caller once every server has been tried.
    Terminal errors and a busy lock go to the caller at once; so does
    :class:`AcquireTimeout` at ``deadline``. A held lock is never in play
    here: its loss is the lock's business.

    Each attempt and failure is logged at DEBUG on the ``monolock`` logger,
    each retry (a backoff sleep) and each server left out at WARNING.
    """
    backoff = backoff or Backoff()
    servers = config.servers
    live = [True] * len(servers)  # False: left out (not monolock, a refused certificate)
    cursor = 0
    skipped: list[MonolockError] = []  # servers not reached (or not monolock) since the last sleep
    last: MonolockError | None = None  # the last attempt's failure
    while True:
        connect_timeout = config.connect_timeout
        if deadline is not None:
            remaining = deadline - clock()
            if remaining <= 0:
                raise timeout_error(name, last)
            if connect_timeout is None or remaining < connect_timeout:
                connect_timeout = remaining
        logger.debug("acquire %r: connecting to %s", name, servers[cursor])
        result = yield Attempt(servers[cursor], connect_timeout, deadline)
        if not isinstance(result, Failure):
            assert result is not None
            return result
        error = last = result.error
        logger.debug("acquire %r: %s", name, unprefixed(error))
        if leaves_rotation(error):
            live[cursor] = False
            if not any(live):
                raise error  # retrying a wrong port only hides the mistake
            logger.warning("acquire %r: left out of this acquisition: %s", name, unprefixed(error))
        if isinstance(error, NotActive) and not try_only:
            # A passive server of an HA cell: the cell is alive and elects
            # within its TTL, so the backoff starts over and the next attempt
            # goes to the leader it named (a try takes it as a requeue).
            cursor = _leader_or_next(live, cursor, leader_index(servers, error.reason))
            backoff.reset()
            delay = backoff.next_delay()
            backoff.reset()  # that pause, delay_0, is no step of the backoff
            why = unprefixed(error)
        else:
            cursor = _next_live(live, cursor)
            unreached = _is_unreached(error)
            # A NotMonolock or a refused certificate is not temporary (that
            # server answers the same way again), but the walk still goes on
            # at once to the servers left.
            movable = error.temporary or leaves_rotation(error)
            if movable and (unreached or (try_only and isinstance(error, _REQUEUE))):
                # On at once, until every server left has failed since the
                # last sleep (a try: in its one pass, temporary errors included).
                skipped.append(error)
                if sum(not leaves_rotation(e) for e in skipped) < sum(live):
                    continue
                if try_only:
                    if len(servers) == 1 or not all(_is_unreached(e) for e in skipped):
                        raise error  # the last error of the pass
                    raise ConnectError(PREFIX + _unreached(skipped)) from error
            elif isinstance(error, _REQUEUE) and error.temporary and not try_only:
                if result.queued * 1000 >= RETRY_RESET_AFTER_QUEUED_MS:
                    backoff.reset()
            else:
                raise error
            why = _unreached(skipped) if unreached else unprefixed(error)
            delay = backoff.next_delay()
        skipped = []  # a sleep, or an answer, starts the count of failed connects over
        if deadline is not None:
            remaining = deadline - clock()
            if remaining <= 0:
                raise timeout_error(name, last)
            # Never sleep past the deadline; the timeout comes when it passes.
            delay = min(delay, remaining)
        logger.warning("acquire %r failed, retrying in %.3f s: %s", name, delay, why)
        yield Sleep(delay)


def _is_unreached(error: MonolockError) -> bool:
    return isinstance(error, (ConnectError, NotMonolock))


def _unreached(skipped: list[MonolockError]) -> str:
    texts = "; ".join(unprefixed(e) for e in skipped)
    return f"no server could be reached: {texts}"


def _leader_or_next(live: list[bool], cursor: int, leader: int | None) -> int:
    """Where to go after a passive server's answer: the leader it named,
    if that server is still in the walk (it may have failed before: a
    restarted server may lead now), else on as after any failure."""
    if leader is not None and live[leader]:
        return leader
    return _next_live(live, cursor)


def _next_live(live: list[bool], cursor: int) -> int:
    """The next server after ``cursor`` still in the walk, wrapping around."""
    for step in range(1, len(live) + 1):
        index = (cursor + step) % len(live)
        if live[index]:
            return index
    return cursor


def run_sync(
    plan: Generator[Step, L | Failure | None, L],
    attempt: Callable[[Attempt], L | Failure],
    sleep: Callable[[float], None],
) -> L:
    """Drive a plan with blocking steps (the asyncio twin is in aio.py). An
    attempt returns the lock or a :class:`Failure`; a
    :class:`~monolock.errors.MonolockError` it raises counts as a failure
    too. A sleep's error (a cancel) goes to the caller."""
    result: L | Failure | None = None
    try:
        while True:
            try:
                step = plan.send(result)
            except StopIteration as stop:
                value: L = stop.value
                return value
            result = None
            if isinstance(step, Attempt):
                try:
                    result = attempt(step)
                except MonolockError as exc:
                    result = Failure(exc)
            else:
                sleep(step.seconds)
    finally:
        plan.close()
