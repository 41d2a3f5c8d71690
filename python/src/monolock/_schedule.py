"""Timing rules shared by every client: the heartbeat schedule and the retry
backoff. Pure arithmetic, no clock and no I/O; tests/test_schedule.py checks
them against spec/vectors/heartbeat.json and spec/constants.json."""

from __future__ import annotations

import random
from typing import Callable

from . import _constants_gen as spec

BASE_INTERVAL_FACTOR = spec.HEARTBEAT_BASE_INTERVAL_FACTOR
CLIENT_TIMEOUT_FACTOR = spec.HEARTBEAT_CLIENT_TIMEOUT_FACTOR
SRTT_ALPHA = spec.HEARTBEAT_SRTT_ALPHA
SAFE_RTT_FACTOR = spec.HEARTBEAT_SAFE_RTT_FACTOR
MIN_INTERVAL_MS = float(spec.HEARTBEAT_MIN_INTERVAL_MS)

RETRY_INITIAL_MS = float(spec.RETRY_INITIAL_MS)
RETRY_MAX_MS = float(spec.RETRY_MAX_MS)
RETRY_MULTIPLIER = float(spec.RETRY_MULTIPLIER)
RETRY_RESET_AFTER_QUEUED_MS = float(spec.RETRY_RESET_AFTER_QUEUED_MS)


class HeartbeatSchedule:
    """Heartbeat interval and client timeout for one lease, in milliseconds.

    ``interval = clamp(lease/4 - 2*srtt, 1 ms, lease/4)`` where ``srtt`` is
    an EWMA (alpha 0.2) of RTT samples; the first sample initialises it. The
    client timeout, ``0.8 * lease``, does not depend on the RTT.
    """

    def __init__(self, lease_ms: int) -> None:
        self.lease_ms = lease_ms
        self.base_interval_ms = lease_ms * BASE_INTERVAL_FACTOR
        self.client_timeout_ms = lease_ms * CLIENT_TIMEOUT_FACTOR
        self.srtt_ms: float | None = None

    def add_rtt_sample(self, rtt_ms: float) -> None:
        """Fold one RTT sample (send of a request to its reply) into srtt."""
        if self.srtt_ms is None:
            self.srtt_ms = rtt_ms
        else:
            self.srtt_ms += SRTT_ALPHA * (rtt_ms - self.srtt_ms)

    @property
    def interval_ms(self) -> float:
        """Time from one send to the next, as long as acks come in time."""
        if self.srtt_ms is None:
            return self.base_interval_ms
        wanted = self.base_interval_ms - SAFE_RTT_FACTOR * self.srtt_ms
        # The lower clamp comes first: for leases under 4 ms the base
        # interval itself is below the minimum and wins.
        return min(max(wanted, MIN_INTERVAL_MS), self.base_interval_ms)


class Backoff:
    """Delays between attempts of a waiting acquisition, in seconds.

    Attempt n waits a uniformly random time in ``[d/2, d]`` with
    ``d = min(2 s, 50 ms * 2**n)`` ("equal jitter"): quick first retries,
    bounded later ones, and waiters that fell together spread apart.
    :meth:`reset` starts the sequence again from n = 0.
    """

    def __init__(self, rand: Callable[[], float] = random.random) -> None:
        self._rand = rand
        self._attempt = 0

    def ceiling_ms(self, attempt: int) -> float:
        """The upper bound ``d`` of the delay before retry number ``attempt``."""
        # Cap the exponent: past it the delay is at its maximum anyway.
        return min(RETRY_MAX_MS, RETRY_INITIAL_MS * RETRY_MULTIPLIER ** min(attempt, 64))

    def reset(self) -> None:
        """Start again from the shortest delay."""
        self._attempt = 0

    def next_delay(self) -> float:
        """The delay before the next attempt, in seconds."""
        ceiling = self.ceiling_ms(self._attempt)
        self._attempt += 1
        return (ceiling / 2 + self._rand() * ceiling / 2) / 1000
