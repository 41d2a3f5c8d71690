"""Heartbeat schedule and backoff against spec/vectors/heartbeat.json and
spec/constants.json."""

from __future__ import annotations

from typing import Any

import pytest

from monolock import _schedule as sched

from .support import load_spec

CONSTANTS = load_spec("constants.json")
HEARTBEAT = load_spec("vectors/heartbeat.json")
TOL = HEARTBEAT["tolerance_ms"]


def test_constants_match_spec() -> None:
    hb = CONSTANTS["heartbeat"]
    assert sched.BASE_INTERVAL_FACTOR == hb["base_interval_factor"]
    assert sched.CLIENT_TIMEOUT_FACTOR == hb["client_timeout_factor"]
    assert sched.SRTT_ALPHA == hb["srtt_alpha"]
    assert sched.SAFE_RTT_FACTOR == hb["safe_rtt_factor"]
    assert sched.MIN_INTERVAL_MS == hb["min_interval_ms"]
    retry = CONSTANTS["retry"]
    assert sched.RETRY_INITIAL_MS == retry["initial_ms"]
    assert sched.RETRY_MAX_MS == retry["max_ms"]
    assert sched.RETRY_MULTIPLIER == retry["multiplier"]


@pytest.mark.parametrize("case", HEARTBEAT["cases"], ids=lambda c: c["desc"])
def test_heartbeat_vectors(case: dict[str, Any]) -> None:
    s = sched.HeartbeatSchedule(case["lease_ms"])
    assert s.base_interval_ms == pytest.approx(case["base_interval_ms"], abs=TOL)
    assert s.client_timeout_ms == pytest.approx(case["client_timeout_ms"], abs=TOL)
    assert s.interval_ms == pytest.approx(case["initial_interval_ms"], abs=TOL)
    for step in case["steps"]:
        s.add_rtt_sample(step["rtt_ms"])
        assert s.srtt_ms == pytest.approx(step["srtt_ms"], abs=TOL)
        assert s.interval_ms == pytest.approx(step["interval_ms"], abs=TOL)
        assert s.client_timeout_ms == pytest.approx(case["client_timeout_ms"], abs=TOL)


def test_backoff_equal_jitter_bounds() -> None:
    retry = CONSTANTS["retry"]
    for rand, pick in ((lambda: 0.0, 0.5), (lambda: 1.0, 1.0)):
        b = sched.Backoff(rand)
        for n in range(12):
            ceiling = min(retry["max_ms"], retry["initial_ms"] * retry["multiplier"] ** n)
            assert b.next_delay() == pytest.approx(ceiling * pick / 1000)


def test_backoff_random_delays_stay_in_range() -> None:
    b = sched.Backoff()
    for n in range(100):
        ceiling = b.ceiling_ms(n) / 1000
        delay = b.next_delay()
        assert ceiling / 2 <= delay <= ceiling
    assert b.ceiling_ms(10_000) == CONSTANTS["retry"]["max_ms"]


def test_release_wait_matches_spec() -> None:
    from monolock import _lock

    assert _lock.RELEASE_WAIT_MAX * 1000 == CONSTANTS["release"]["max_wait_ms"]
