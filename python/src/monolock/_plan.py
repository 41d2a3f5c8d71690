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
from ._schedule import Backoff
from .errors import (
    AcquireTimeout,
    ConnectError,
    ConnectionClosed,
    HeartbeatTimeout,
    MonolockError,
    ProtocolViolation,
    ServerError,
)

L = TypeVar("L")


@dataclass(frozen=True)
class Attempt:
    """Connect to ``address`` within ``connect_timeout`` seconds, send
    ACQUIRE and wait for the grant until ``deadline`` (monotonic seconds,
    ``None``: no limit).

    The executor returns the lock, or raises: :class:`ConnectError` when the
    connection could not be made, :class:`AcquireTimeout` at the deadline,
    else the session's error. On any failure it leaves the connection closed.
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
) -> tuple[bytes, Generator[Step, L | None, L]]:
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
) -> Generator[Step, L | None, L]:
    """Yield the steps of one acquisition and return the lock.

    Each attempt walks the server list in order, moving on only when a
    server cannot be reached, so every client prefers the same server.
    A waiting acquisition re-queues after temporary errors and broken
    connections, with backoff, until ``deadline``; a try-acquisition makes
    one pass and reports what it met. Terminal errors go to the caller.
    A held lock is never in play here: loss is the lock's business.
    """
    backoff = backoff or Backoff()
    last: MonolockError | None = None
    while True:
        for address in config.servers:
            connect_timeout = config.connect_timeout
            if deadline is not None:
                remaining = deadline - clock()
                if remaining <= 0:
                    raise _deadline_error(last)
                if connect_timeout is None or remaining < connect_timeout:
                    connect_timeout = remaining
            try:
                lock = yield Attempt(address, connect_timeout, deadline)
            except ConnectError as exc:
                if not exc.temporary:
                    raise
                last = exc
                continue
            except _REQUEUE as exc:
                if try_only or not exc.temporary:
                    raise
                last = exc
                break
            assert lock is not None
            return lock
        else:
            if try_only:
                if last is not None and len(config.servers) == 1:
                    raise last
                error = ConnectError("monolock: no server could be reached")
                error.__cause__ = last
                raise error
        delay = backoff.next_delay()
        if deadline is not None:
            remaining = deadline - clock()
            if remaining <= 0:
                raise _deadline_error(last)
            # Never sleep past the deadline; the timeout comes when it passes.
            delay = min(delay, remaining)
        yield Sleep(delay)


def run_sync(
    plan: Generator[Step, L | None, L],
    attempt: Callable[[Attempt], L],
    sleep: Callable[[float], None],
) -> L:
    """Drive a plan with blocking steps (the asyncio twin is in aio.py)."""
    result: L | None = None
    error: MonolockError | None = None
    try:
        while True:
            try:
                step = plan.throw(error) if error is not None else plan.send(result)
            except StopIteration as stop:
                value: L = stop.value
                return value
            result, error = None, None
            try:
                if isinstance(step, Attempt):
                    result = attempt(step)
                else:
                    sleep(step.seconds)
            except MonolockError as exc:
                error = exc
    finally:
        plan.close()
