"""The acquisition policy: every case of spec/vectors/retry.json, then the
caller's deadline, with a scripted executor and a fake clock."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Generator
from typing import Any

import pytest

from monolock import errors
from monolock._config import Address, ClientConfig
from monolock._connecting import certificate_problem, connect_error
from monolock._failure import Failure
from monolock._plan import (
    Attempt,
    Sleep,
    Step,
    acquisition_plan,
    run_sync,
)
from monolock._schedule import Backoff
from monolock.errors import unprefixed

from .support import load_spec

RETRY = load_spec("vectors/retry.json")

A = "127.0.0.1:1"
B = "127.0.0.1:2"


class Script:
    """Answers each Attempt with the next scripted outcome and records the
    steps; time moves only by Sleep (and by ``attempt_cost``)."""

    def __init__(self, outcomes: list[object], attempt_cost: float = 0.0) -> None:
        self.outcomes = outcomes
        self.steps: list[Step] = []
        self.now = 0.0
        self.attempt_cost = attempt_cost

    def clock(self) -> float:
        return self.now

    def attempt(self, step: Attempt) -> str | Failure:
        self.steps.append(step)
        self.now += self.attempt_cost
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        assert isinstance(outcome, (str, Failure))
        return outcome

    def sleep(self, seconds: float) -> None:
        self.steps.append(Sleep(seconds))
        self.now += seconds

    @property
    def addresses(self) -> list[str]:
        return [str(s.address) for s in self.steps if isinstance(s, Attempt)]

    @property
    def sleeps(self) -> list[float]:
        return [s.seconds for s in self.steps if isinstance(s, Sleep)]


def run(
    script: Script,
    *servers: str,
    deadline: float | None = None,
    try_only: bool = False,
    connect_timeout: float | None = 5.0,
) -> str:
    config = ClientConfig(list(servers) or [A], connect_timeout=connect_timeout)
    plan: Generator[Step, str | Failure | None, str] = acquisition_plan(
        config,
        deadline,
        try_only=try_only,
        name="jobs/x",
        clock=script.clock,
        backoff=Backoff(lambda: 1.0),
    )
    return run_sync(plan, script.attempt, script.sleep)


def conn_error(address: str = A) -> errors.ConnectError:
    return errors.ConnectError(f"monolock: cannot connect to {address}: refused")


def alert(reason: str) -> ssl.SSLError:
    """An SSLError as OpenSSL raises it for a TLS alert the server sent."""
    exc = ssl.SSLError(1, f"[SSL: {reason}] {reason.lower()} (_ssl.c:2580)")
    exc.reason = reason
    return exc


def unverified() -> ssl.SSLCertVerificationError:
    text = "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: Hostname mismatch"
    return ssl.SSLCertVerificationError(1, text)


def cert_error(address: str = A, *, ours: bool = False) -> errors.ConnectError:
    """A handshake that failed on a certificate: the server's (refused by
    this client) or, with ``ours``, this client's (refused by the server)."""
    exc = alert("TLSV13_ALERT_CERTIFICATE_REQUIRED") if ours else unverified()
    return connect_error(address, exc, handshake=True)


def test_first_attempt_wins() -> None:
    s = Script(["lock"])
    assert run(s) == "lock"
    assert s.steps == [Attempt(Address("127.0.0.1", 1), 5.0, None)]


@pytest.mark.parametrize(
    "failure",
    [
        errors.ShuttingDown(),
        errors.AdminClosed(),
        errors.ServerError(0x09),
        errors.ConnectionClosed("eof"),
        errors.HeartbeatTimeout("late"),
        errors.ProtocolViolation("junk"),
        conn_error(),
    ],
    ids=lambda e: type(e).__name__,
)
def test_waiting_requeues_after_temporary_failures(failure: errors.MonolockError) -> None:
    s = Script([failure, failure, "lock"])
    assert run(s) == "lock"
    # Equal jitter with rand=1: the full ceiling, doubling from 50 ms.
    assert s.sleeps == pytest.approx([0.05, 0.1])


@pytest.mark.parametrize(
    "failure",
    [errors.NameTooLong(), errors.NotAuthorized(), errors.ServerError(0x7E)],
    ids=lambda e: type(e).__name__,
)
def test_terminal_errors_go_to_the_caller(failure: errors.ServerError) -> None:
    s = Script([failure])
    with pytest.raises(type(failure)):
        run(s)
    assert s.sleeps == []


@pytest.mark.parametrize(
    "failure",
    [errors.ShuttingDown(), errors.ConnectionClosed("eof"), errors.LockBusy("x")],
    ids=lambda e: type(e).__name__,
)
def test_try_acquire_never_retries(failure: errors.MonolockError) -> None:
    s = Script([failure])
    with pytest.raises(type(failure)):
        run(s, try_only=True)
    assert len(s.steps) == 1


def test_try_acquire_walks_the_servers_then_reports_connect() -> None:
    s = Script([conn_error(A), conn_error(B)])
    with pytest.raises(errors.ConnectError) as info:
        run(s, A, B, try_only=True)
    assert s.addresses == [A, B]
    assert isinstance(info.value.__cause__, errors.ConnectError)
    assert str(info.value) == (
        f"monolock: no server could be reached: cannot connect to {A}: refused; "
        f"cannot connect to {B}: refused"
    )


def test_unreachable_server_moves_to_the_next_at_once() -> None:
    s = Script([conn_error(), "lock"])
    assert run(s, A, B) == "lock"
    assert s.addresses == [A, B] and s.sleeps == []


def test_rotation_after_a_requeue_and_after_a_connect_failure() -> None:
    s = Script([errors.ShuttingDown(), conn_error(), "lock"])
    assert run(s, A, B) == "lock"
    assert s.addresses == [A, B, A]
    assert s.sleeps == pytest.approx([0.05])  # after the requeue only


def test_all_unreachable_backs_off_then_tries_again() -> None:
    s = Script([conn_error(), conn_error(), conn_error(), "lock"])
    assert run(s, A, B) == "lock"
    assert s.addresses == [A, B, A, B]
    assert s.sleeps == pytest.approx([0.05])


def test_long_queue_resets_the_backoff() -> None:
    s = Script(
        [
            errors.ShuttingDown(),
            errors.ShuttingDown(),
            Failure(errors.ConnectionClosed("eof"), queued=2.0),
            "lock",
        ]
    )
    assert run(s) == "lock"
    assert s.sleeps == pytest.approx([0.05, 0.1, 0.05])


def test_terminal_connect_error_is_raised() -> None:
    refused = errors.ConnectError("monolock: a connect failure that is not temporary")
    refused.temporary = False
    s = Script([refused])
    with pytest.raises(errors.ConnectError):
        run(s, A, B)
    assert s.addresses == [A]


def test_deadline_bounds_sleep_and_raises_timeout_with_cause() -> None:
    s = Script([errors.ShuttingDown()] * 20)
    with pytest.raises(errors.AcquireTimeout) as info:
        run(s, deadline=0.2)
    assert isinstance(info.value.__cause__, errors.ShuttingDown)
    assert str(info.value) == (
        'monolock: timed out waiting for the lock "jobs/x" '
        "(last attempt: server shutting down (0x01))"
    )
    # 0.05 + 0.1, then the rest up to the deadline, never past it.
    assert s.sleeps == pytest.approx([0.05, 0.1, 0.05])
    assert s.now == pytest.approx(0.2)


def test_connect_timeout_is_cut_to_the_deadline() -> None:
    s = Script(["lock"])
    s.now = 9.0
    run(s, deadline=10.0, connect_timeout=5.0)
    step = s.steps[0]
    assert isinstance(step, Attempt)
    assert step.connect_timeout == pytest.approx(1.0) and step.deadline == 10.0


def test_no_connect_timeout_takes_the_deadline() -> None:
    s = Script(["lock"])
    run(s, deadline=3.0, connect_timeout=None)
    step = s.steps[0]
    assert isinstance(step, Attempt) and step.connect_timeout == pytest.approx(3.0)


def test_acquire_timeout_from_the_attempt_is_final() -> None:
    s = Script([errors.AcquireTimeout()])
    with pytest.raises(errors.AcquireTimeout):
        run(s, deadline=1.0)
    assert len(s.steps) == 1


def test_cancel_is_final() -> None:
    s = Script([errors.AcquireCancelled()])
    with pytest.raises(errors.AcquireCancelled):
        run(s)


def test_no_deadline_retries_on() -> None:
    s = Script([conn_error()] * 30 + ["lock"])
    assert run(s) == "lock"
    assert max(s.sleeps) == pytest.approx(2.0)  # capped at 2 s


# -- spec/vectors/retry.json --------------------------------------------------------


def vector_failure(
    step: dict[str, Any], as_not_monolock: str, servers: list[str], pick: str
) -> Failure:
    outcome = step["outcome"]
    error: errors.MonolockError
    if outcome == "connect_failed":
        error = conn_error()
    elif outcome == "requeue":
        error = errors.ShuttingDown()
    elif outcome == "terminal":
        error = errors.NotAuthorized()
    elif outcome == "not_monolock" and as_not_monolock == "http":
        error = errors.NotMonolock("127.0.0.1:7118", b"HTTP/1.1 400 Bad Request")
    elif outcome == "not_monolock":
        # A TLS handshake that failed on a certificate is the same outcome.
        error = cert_error("127.0.0.1:7118", ours=as_not_monolock == "client certificate")
    elif outcome == "not_active":
        error = errors.error_for_code(0x03, leader_reason(step.get("leader"), servers, pick))
    else:
        assert outcome == "busy", outcome
        error = errors.LockBusy("x")
    return Failure(error, step.get("queued_ms", 0) / 1000)


def leader_reason(leader: int | None, servers: list[str], pick: str) -> str:
    """What a passive server says to name ``leader``: that server's address
    in other letters; for none of the list (None), the canonical text (an
    empty reason) or, the other time, an address the client does not have."""
    if leader is None:
        return "" if pick == "low" else "10.0.0.9:7117"
    return servers[leader].upper()


@pytest.mark.parametrize("as_not_monolock", ["http", "server certificate", "client certificate"])
@pytest.mark.parametrize("pick", ["low", "high"])
@pytest.mark.parametrize("case", RETRY["cases"], ids=lambda c: c["name"])
def test_retry_vector(case: dict[str, Any], pick: str, as_not_monolock: str) -> None:
    """Each case twice: with the jitter at its low end and at its high end,
    so that both ends of every ``sleep LO..HI`` are checked exactly. The
    outcome not_monolock is played by an HTTP answer and by each side's
    refused certificate."""
    # Names with capitals: a passive server may spell the leader otherwise.
    servers = [f"Server-{i}.Example:{i + 1}" for i in range(case["servers"])]
    plan: Generator[Step, str | Failure | None, str] = acquisition_plan(
        ClientConfig(servers),
        None,
        try_only=case["mode"] == "try",
        backoff=Backoff(lambda: 0.0 if pick == "low" else 1.0),
    )
    result: str | Failure | None = None
    for step in case["steps"]:
        expect = step["expect"]
        if expect == "give_up":
            assert isinstance(result, Failure)
            with pytest.raises(errors.MonolockError) as info:
                plan.send(result)
            assert info.value is result.error or info.value.__cause__ is result.error
            return
        action = plan.send(result)
        verb, _, arg = expect.partition(" ")
        if verb == "connect":
            assert isinstance(action, Attempt), (expect, action)
            assert str(action.address) == servers[int(arg)], expect
            granted = step["outcome"] == "granted"
            result = "lock" if granted else vector_failure(step, as_not_monolock, servers, pick)
        else:
            assert verb == "sleep" and isinstance(action, Sleep), (expect, action)
            low, high = (float(x) for x in arg.split(".."))
            assert action.seconds * 1000 == pytest.approx(low if pick == "low" else high)
            result = None
    with pytest.raises(StopIteration) as stop:
        plan.send(result)
    assert stop.value.value == "lock"


def test_a_server_that_is_down_is_the_cause_of_the_timeout() -> None:
    """Not "the lock stayed busy": the last attempt's failure is kept."""
    s = Script([conn_error()] * 20, attempt_cost=0.03)
    with pytest.raises(errors.AcquireTimeout) as info:
        run(s, deadline=0.5)
    assert isinstance(info.value.__cause__, errors.ConnectError)
    assert f"(last attempt: cannot connect to {A}: refused)" in str(info.value)


def test_retries_log_at_warning_and_progress_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    wrong = errors.NotMonolock(B, b"HTTP/1.1 400")
    s = Script([conn_error(A), wrong, errors.ShuttingDown(), "lock"])
    with caplog.at_level(logging.DEBUG, logger="monolock"):
        assert run(s, A, B) == "lock"
    records = [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
    assert records == [
        ("monolock", "DEBUG", f"acquire 'jobs/x': connecting to {A}"),
        ("monolock", "DEBUG", f"acquire 'jobs/x': cannot connect to {A}: refused"),
        ("monolock", "DEBUG", f"acquire 'jobs/x': connecting to {B}"),
        ("monolock", "DEBUG", f"acquire 'jobs/x': {unprefixed(wrong)}"),
        (
            "monolock",
            "WARNING",
            f"acquire 'jobs/x': left out of this acquisition: {unprefixed(wrong)}",
        ),
        (
            "monolock",
            "WARNING",
            "acquire 'jobs/x' failed, retrying in 0.050 s: no server could be reached: "
            f"cannot connect to {A}: refused; {unprefixed(wrong)}",
        ),
        ("monolock", "DEBUG", f"acquire 'jobs/x': connecting to {A}"),
        ("monolock", "DEBUG", "acquire 'jobs/x': server shutting down (0x01)"),
        (
            "monolock",
            "WARNING",
            "acquire 'jobs/x' failed, retrying in 0.100 s: server shutting down (0x01)",
        ),
        ("monolock", "DEBUG", f"acquire 'jobs/x': connecting to {A}"),
    ]


def test_a_retry_after_a_requeue_logs_the_requeue(caplog: pytest.LogCaptureFixture) -> None:
    s = Script([conn_error(A), errors.ShuttingDown(), "lock"])
    with caplog.at_level(logging.WARNING, logger="monolock"):
        assert run(s, A, B) == "lock"
    assert [r.getMessage() for r in caplog.records] == [
        "acquire 'jobs/x' failed, retrying in 0.050 s: server shutting down (0x01)"
    ]


def test_try_acquire_moves_past_a_passive_server() -> None:
    """A passive server of an HA cell answers 0x01: a try goes on to the next
    server at once, within its one pass."""
    s = Script([errors.ShuttingDown(), "lock"])
    assert run(s, A, B, try_only=True) == "lock"
    assert s.addresses == [A, B] and s.sleeps == []
    s = Script([errors.ShuttingDown(), conn_error(B)])
    with pytest.raises(errors.ConnectError) as info:
        run(s, A, B, try_only=True)
    assert str(info.value) == f"monolock: cannot connect to {B}: refused"  # the last error
    s = Script([errors.ShuttingDown(), errors.LockBusy("jobs/x")])
    with pytest.raises(errors.LockBusy):
        run(s, A, B, try_only=True)


# -- certificate problems (spec/constants.json, tls_certificate_rule) ---------------


@pytest.mark.parametrize(
    "reason",
    [
        "SSLV3_ALERT_BAD_CERTIFICATE",
        "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE",
        "SSLV3_ALERT_CERTIFICATE_REVOKED",
        "SSLV3_ALERT_CERTIFICATE_EXPIRED",
        "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
        "TLSV1_ALERT_UNKNOWN_CA",
        "TLSV1_ALERT_ACCESS_DENIED",
        "TLSV13_ALERT_CERTIFICATE_REQUIRED",
    ],
)
def test_a_certificate_alert_from_the_server_refused_ours(reason: str) -> None:
    assert certificate_problem(alert(reason)) == "client"
    error = connect_error(A, alert(reason), handshake=True)
    assert str(error) == (
        f"monolock: TLS handshake with {A} failed: [SSL: {reason}] {reason.lower()} "
        "(_ssl.c:2580) (the server refused this client's certificate: "
        "give a client certificate that its CA signs)"
    )
    assert error.certificate == "client" and not error.temporary and error.code is None


def test_a_refused_server_certificate_says_what_to_check() -> None:
    assert certificate_problem(unverified()) == "server"
    error = connect_error(A, unverified(), handshake=True)
    assert str(error) == (
        f"monolock: TLS handshake with {A} failed: {unverified()} "
        "(the server's certificate is not trusted: check the CA file and the server name)"
    )
    assert error.certificate == "server" and not error.temporary and error.code is None


@pytest.mark.parametrize(
    "exc",
    [
        alert("SSLV3_ALERT_HANDSHAKE_FAILURE"),
        alert("WRONG_VERSION_NUMBER"),
        ConnectionResetError("reset"),
        TimeoutError("timed out"),
    ],
    ids=lambda e: getattr(e, "reason", None) or type(e).__name__,
)
def test_other_handshake_failures_are_no_certificate_problem(exc: OSError) -> None:
    assert certificate_problem(exc) is None
    error = connect_error(A, exc, handshake=True)
    assert error.certificate is None and error.temporary
    assert "certificate is not trusted" not in str(error)
    assert "refused this client's certificate" not in str(error)


@pytest.mark.parametrize("ours", [False, True], ids=["server's", "client's"])
def test_a_certificate_problem_with_one_server_fails_at_once(ours: bool) -> None:
    refused = cert_error(ours=ours)
    s = Script([refused])
    with pytest.raises(errors.ConnectError) as info:
        run(s, deadline=10.0)
    assert info.value is refused
    assert s.addresses == [A] and s.sleeps == []


def test_a_certificate_problem_leaves_the_rotation() -> None:
    """The next server is tried at once; after its temporary failure the
    plan sleeps and asks it again, never the refused one."""
    s = Script([cert_error(A), errors.ConnectionClosed("eof"), conn_error(B), "lock"])
    assert run(s, A, B) == "lock"
    assert s.addresses == [A, B, B, B]
    assert s.sleeps == pytest.approx([0.05, 0.1])


def test_a_try_with_certificate_problems_everywhere_raises_the_last() -> None:
    last = cert_error(B, ours=True)
    s = Script([cert_error(A), last])
    with pytest.raises(errors.ConnectError) as info:
        run(s, A, B, try_only=True)
    assert info.value is last and s.addresses == [A, B]
