"""Every case of spec/vectors/watch.json fed to the watch core; the leader
is read as ``Watch.leader()`` reads it."""

from __future__ import annotations

from typing import Any

import pytest

from monolock._watch import (
    GapError,
    LeaderState,
    Observation,
    UnaskedError,
    WatchCore,
    leader_of,
)

from .support import load_spec
from .test_watch_protocol import event_of, num

CASES = load_spec("vectors/watch.json")["cases"]
T0 = 1_000_000 * 1_000_000_000  # the steps' `at` counts from here, in ns


def describe_leader(o: Observation, now: float) -> str:
    """An observation in the vectors' words."""
    if o.state is LeaderState.LEADER:
        return f"leader {o.token} {o.value.decode()}"
    if o.state is LeaderState.HELD_BACK:
        assert o.until is not None
        return f"held_back {o.token} {round((o.until - now) * 1000)}"
    if o.state is LeaderState.NO_LEADER:
        return "none"
    return "unknown"


def take(core: WatchCore, step: dict[str, Any], now: int, where: str) -> None:
    """Feed one input; raises what the core raises."""
    kind = step["in"]
    if kind in ("send WATCH", "send HEARTBEAT"):
        if "resume" in step:
            want = [num(n) for n in step["resume"]]
            assert [core.view.epoch, core.view.seq] == want, f"{where}: the WATCH resumes"
        core.sent(now)
    elif kind == "event":
        core.event(event_of(step["event"]), now)
    elif kind == "watching":
        core.watching(num(step["epoch"]), num(step["seq"]))
    elif kind == "disconnect":
        core.disconnected()
    else:
        assert kind == "check", f"{where}: unknown input"


def check(core: WatchCore, step: dict[str, Any], now: int, where: str) -> None:
    state = core.state(now)
    if "known" in step:
        assert state.known == step["known"], f"{where}: known"
    if "valid_until" in step:
        assert core.valid_until == T0 + step["valid_until"] * 1_000_000, f"{where}: valid_until"
    if "holders" in step:
        assert [str(h.token) for h in state.holders] == step["holders"], f"{where}: holders"
    if "waiters" in step:
        assert [str(w.arrival) for w in state.waiters] == step["waiters"], f"{where}: waiters"
    if "waiter_values" in step:
        values = [w.value.decode() for w in state.waiters]
        assert values == step["waiter_values"], f"{where}: waiter values"
    if step.get("leader"):
        seconds = now / 1e9
        got = describe_leader(leader_of(state, seconds), seconds)
        assert got == step["leader"], f"{where}: leader"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["name"])
def test_watch_vectors(case: dict[str, Any]) -> None:
    core = WatchCore(case["lease_ms"])
    for i, step in enumerate(case["steps"]):
        now = T0 + step["at"] * 1_000_000
        where = f"step {i + 1} ({step['in']} at {step['at']})"
        expected = {"gap": GapError, "protocol": UnaskedError}.get(step.get("error", ""))
        if expected is None:
            take(core, step, now, where)
        else:
            with pytest.raises(expected):
                take(core, step, now, where)
        check(core, step, now, where)


def test_retry_follows_the_leader_hint_without_backoff() -> None:
    from monolock._config import parse_servers
    from monolock._schedule import Backoff
    from monolock._watch import WatchRetry
    from monolock.errors import ConnectionClosed, NotActive, NotAuthorized, WatcherBehind

    retry = WatchRetry(parse_servers(["a:1", "b:2", "c:3"]), Backoff(lambda: 1.0))
    assert str(retry.next_address()) == "a:1"
    assert retry.after(NotActive("c:3"), vouched=False) == 0.0
    assert str(retry.next_address()) == "c:3"
    assert retry.after(WatcherBehind(), vouched=True) == 0.05  # reset by the answer
    assert retry.after(ConnectionClosed("monolock: gone"), vouched=False) == 0.1
    assert str(retry.next_address()) == "a:1"
    with pytest.raises(NotAuthorized):
        retry.after(NotAuthorized(), vouched=False)
