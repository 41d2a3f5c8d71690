"""The acquisition policy, written once for both APIs.

:func:`acquisition_plan` is a generator that yields the I/O steps to take
(:class:`Attempt`, :class:`Sleep`) and receives their results; the sync
client runs it with blocking calls, the asyncio client with awaits
(:func:`run_sync` here, ``_run_async`` in :mod:`monolock.aio`). The rules
live only here: which failures are retried, server order, backoff, and the
caller's deadline.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Callable, TypeVar, Union

from . import _protocol as proto
from ._config import Address, ClientConfig, check_timeout
from ._schedule import RETRY_RESET_AFTER_QUEUED_MS, Backoff
from .errors import (
    AcquireTimeout,
    ConnectError,
    ConnectionClosed,
    HeartbeatTimeout,
    MonolockError,
    NotMonolock,
    ProtocolViolation,
    ServerError,
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
class Failure:
    """The outcome of an attempt that did not end in a grant."""

    error: MonolockError
    queued: float = 0.0
    """Seconds the claim had been queued (after WAITING) when it failed."""


@dataclass(frozen=True)
class Sleep:
    """Wait ``seconds`` before the next attempt."""

    seconds: float


Step = Union[Attempt, Sleep]

# Errors after which a waiting acquisition re-queues on a new connection,
# provided they are temporary.
_REQUEUE = (ServerError, ConnectionClosed, HeartbeatTimeout, ProtocolViolation)


def connect_error(address: Address, exc: OSError) -> ConnectError:
    """The error for a failed connection attempt (TCP or TLS handshake)."""
    # A refused certificate counts as a failed connection, as in every
    # client: another server of the list may be fine, and a waiting
    # acquisition retries until its deadline, which then carries this cause.
    return ConnectError(f"monolock: cannot connect to {address}: {exc}")


def _deadline_error(last: MonolockError | None) -> AcquireTimeout:
    error = AcquireTimeout()
    error.__cause__ = last
    return error


def prepare_acquisition(
    config: ClientConfig, name: str | bytes, timeout: float | None, *, try_only: bool
) -> tuple[bytes, Generator[Step, L | Failure | None, L]]:
    """Check a caller's ``acquire`` arguments and plan the acquisition:
    returns the name's wire bytes and the plan. Invalid names and timeouts
    raise here, before any byte is sent; the timeout starts now."""
    raw = proto.encode_name(name)
    timeout = check_timeout(timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    return raw, acquisition_plan(config, deadline, try_only=try_only)


def acquisition_plan(
    config: ClientConfig,
    deadline: float | None,
    *,
    try_only: bool,
    clock: Callable[[], float] = time.monotonic,
    backoff: Backoff | None = None,
) -> Generator[Step, L | Failure | None, L]:
    """Yield the steps of one acquisition and return the lock.

    The retry policy of spec/constants.json (``retry``), the same in every
    client. One cursor walks the server list, wrapping around, and moves to
    the next server after any failed attempt. A server that cannot be
    reached is followed by the next attempt at once, unless every server has
    failed to connect since the last sleep; a server that answered and then
    failed the claim (a temporary error, a dropped connection, the client
    timeout while waiting) is always followed by a backoff sleep. A server
    that does not speak monolock (:class:`NotMonolock`) leaves the walk for
    good and the next one is tried at once; with none left, its error goes
    to the caller. The backoff starts again after an attempt that had been
    queued for at least ``RETRY_RESET_AFTER_QUEUED_MS``: that server was
    healthy. A try-acquisition makes one pass and never sleeps. Terminal
    errors, and every error of a try-acquisition but unreachable servers, go
    to the caller; so does :class:`AcquireTimeout` at ``deadline``. A held
    lock is never in play here: its loss is the lock's business.
    """
    backoff = backoff or Backoff()
    servers = config.servers
    live = [True] * len(servers)  # False: does not speak monolock, left out
    cursor = 0
    unreachable = 0  # connect failures since the last sleep
    last: MonolockError | None = None
    while True:
        connect_timeout = config.connect_timeout
        if deadline is not None:
            remaining = deadline - clock()
            if remaining <= 0:
                raise _deadline_error(last)
            if connect_timeout is None or remaining < connect_timeout:
                connect_timeout = remaining
        result = yield Attempt(servers[cursor], connect_timeout, deadline)
        if not isinstance(result, Failure):
            assert result is not None
            return result
        error = last = result.error
        if isinstance(error, NotMonolock):
            live[cursor] = False
            if not any(live):
                raise error  # retrying a wrong port only hides the mistake
        cursor = _next_live(live, cursor)
        if isinstance(error, (ConnectError, NotMonolock)) and error.temporary:
            # On at once, until every server left has failed since the last sleep.
            if isinstance(error, ConnectError):
                unreachable += 1
            if unreachable < sum(live):
                continue
            if try_only:
                if len(servers) == 1:
                    raise error
                raise ConnectError("monolock: no server could be reached") from error
        elif isinstance(error, _REQUEUE) and error.temporary and not try_only:
            if result.queued * 1000 >= RETRY_RESET_AFTER_QUEUED_MS:
                backoff.reset()
        else:
            raise error
        unreachable = 0
        delay = backoff.next_delay()
        if deadline is not None:
            remaining = deadline - clock()
            if remaining <= 0:
                raise _deadline_error(last)
            # Never sleep past the deadline; the timeout comes when it passes.
            delay = min(delay, remaining)
        yield Sleep(delay)


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
