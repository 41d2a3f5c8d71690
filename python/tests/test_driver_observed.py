"""The conformance driver's reading of observations as observed events,
without a server."""

from __future__ import annotations

from typing import Any

import pytest
from conformance_driver import common
from conformance_driver.common import ObservedEvents, observed_fields

from monolock import LeaderState, Observation


def test_unknown_names_nothing() -> None:
    assert observed_fields(Observation(LeaderState.UNKNOWN)) == {"state": "unknown"}


def test_a_leader_has_token_value_and_candidates() -> None:
    seen = Observation(LeaderState.LEADER, token=2**63 + 1, value=b"\xff:80", candidates=2)
    assert observed_fields(seen) == {
        "state": "leader",
        "token": str(2**63 + 1),  # a string: JSON numbers lose bits above 2^53
        "value": "\ufffd:80",
        "candidates": 2,
    }


def test_a_hold_without_a_term_has_no_token() -> None:
    seen = Observation(LeaderState.HELD_BACK, until=12.5, candidates=1)
    assert observed_fields(seen) == {"state": "held_back", "candidates": 1}


def test_only_changes_the_pipe_shows_are_printed(monkeypatch: pytest.MonkeyPatch) -> None:
    printed: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(common, "emit", lambda event, **fields: printed.append((event, fields)))
    events = ObservedEvents("w")
    events.emit(Observation(LeaderState.UNKNOWN))  # never first
    events.emit(Observation(LeaderState.LEADER, token=5, value=b"a", identity="x"))
    events.emit(Observation(LeaderState.LEADER, token=5, value=b"a", identity="y"))
    events.emit(Observation(LeaderState.UNKNOWN))
    assert printed == [
        ("observed", {"id": "w", **observed_fields(Observation(LeaderState.LEADER, 5, b"a"))}),
        ("observed", {"id": "w", "state": "unknown"}),
    ]
