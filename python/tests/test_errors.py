"""The error classes agree with spec/errors.json, code by code."""

from __future__ import annotations

from typing import Any

import pytest

import monolock
from monolock import errors
from monolock._config import Address
from monolock._connecting import connect_error
from monolock._plan import timeout_error

from .support import load_spec

SPEC = load_spec("errors.json")


@pytest.mark.parametrize("entry", SPEC["errors"], ids=lambda e: e["name"])
def test_every_code_has_its_class(entry: dict[str, Any]) -> None:
    # The classes are generated from the spec (_errors_gen.py); this checks
    # what is written by hand: the lookup by code, the exports, the behaviour.
    cls = errors.ERRORS_BY_CODE[entry["code"]]
    assert getattr(errors, cls.__name__) is cls and cls.__name__ in errors.__all__
    assert getattr(monolock, cls.__name__) is cls and cls.__name__ in monolock.__all__
    assert cls.__module__ == "monolock.errors"
    assert issubclass(cls, errors.ServerError)
    assert cls.code == entry["code"]
    assert cls.text == entry["text"]

    received = errors.error_for_code(entry["code"], "detail")
    assert type(received) is cls
    assert received.code == entry["code"]
    assert received.temporary is entry["temporary"]
    assert received.reason == "detail"
    assert received.from_server
    assert f"0x{entry['code']:02x}" in str(received)

    # An empty reason falls back to the canonical text.
    assert errors.error_for_code(entry["code"]).reason == entry["text"]
    local = errors.error_for_code(entry["code"], from_server=False)
    assert type(local) is cls
    assert local.code == entry["code"] and not local.from_server


def test_table_has_no_extra_codes() -> None:
    assert set(errors.ERRORS_BY_CODE) == {e["code"] for e in SPEC["errors"]}


def test_first_terminal_code() -> None:
    assert errors.FIRST_TERMINAL_CODE == SPEC["first_terminal_code"]
    for code in range(256):
        assert errors.is_temporary_code(code) is (code < SPEC["first_terminal_code"])


@pytest.mark.parametrize("example", SPEC["unknown_code_examples"], ids=lambda e: str(e["code"]))
def test_unknown_codes_are_generic_server_errors(example: dict[str, Any]) -> None:
    err = errors.error_for_code(example["code"], "")
    assert type(err) is errors.ServerError
    assert err.code == example["code"]
    assert err.temporary is example["temporary"]


def test_every_unknown_code_is_classified_by_range() -> None:
    known = set(errors.ERRORS_BY_CODE)
    for code in set(range(256)) - known:
        err = errors.error_for_code(code)
        assert type(err) is errors.ServerError
        assert err.temporary is (code < 0x10)


def test_lock_lost_carries_its_cause() -> None:
    cause = errors.AdminClosed("kicked")
    lost = errors.LockLost("a", 7, cause)
    assert lost.cause is cause and lost.__cause__ is cause
    assert lost.code == 0x02 and lost.temporary
    assert isinstance(lost, monolock.MonolockError)
    timeout = errors.LockLost("a", 7, errors.HeartbeatTimeout("late"))
    assert timeout.code is None


def test_acquire_timeout_is_a_timeout_error() -> None:
    err = errors.AcquireTimeout()
    assert isinstance(err, TimeoutError)
    assert isinstance(err, monolock.MonolockError)
    assert err.code is None
    assert "timed out" in str(err)


def test_wrapped_causes_drop_their_prefix() -> None:
    """spec/constants.json error_prefix: 'monolock: ' exactly once."""
    kicked = errors.error_for_code(0x02, "closed by administrator")
    lost = errors.LockLost("jobs/x", 7, kicked)
    assert str(lost) == "monolock: lock 'jobs/x' (token 7) lost: closed by administrator (0x02)"
    refused = connect_error(Address("127.0.0.1", 1), ConnectionRefusedError(111, "refused"))
    timeout = timeout_error("jobs/x", refused)
    assert str(timeout) == (
        'monolock: timed out waiting for the lock "jobs/x" '
        "(last attempt: cannot connect to 127.0.0.1:1: [Errno 111] refused)"
    )
    assert timeout.__cause__ is refused
    assert str(timeout_error("jobs/x")) == 'monolock: timed out waiting for the lock "jobs/x"'
    samples: list[errors.MonolockError] = [
        kicked,
        lost,
        refused,
        timeout,
        errors.LockLost("a", 1, errors.HeartbeatTimeout("monolock: no reply")),
        errors.LockLost("a", 1, errors.NotMonolock("127.0.0.1:7118", b"HTTP/1.1 400")),
        errors.LockBusy("a"),
        errors.LockReleased("a", 1),
        errors.AcquireTimeout(),
        errors.AcquireCancelled(),
        errors.InvalidLease(from_server=False),
    ]
    for error in samples:
        assert str(error).startswith("monolock: "), error
        assert str(error).count("monolock: ") == 1, error


def test_unprefixed() -> None:
    assert errors.unprefixed("monolock: a: monolock: b") == "a: monolock: b"
    assert errors.unprefixed(ValueError("plain")) == "plain"


@pytest.mark.parametrize(
    ("sent", "quoted"),
    [
        (b"HTTP/1.1 400 Bad Request", '"HTTP/1.1 400…"); is this the admin port?'),
        (b"HTTP/1.1", '"HTTP/1.1"); is this the admin port?'),
        (b"\x15\x03\x03\x00\x02\x02\x46", '"\\x15\\x03\\x03\\x00\\x02\\x02F")'),
        (b"SSH-2.0-OpenSSH_9.6", '"SSH-2.0-Open…")'),
        (b"http/1.1 200", '"http/1.1 200")'),
    ],
)
def test_not_monolock_message(sent: bytes, quoted: str) -> None:
    """spec/constants.json not_monolock_rule: the address, the words, up to
    12 bytes quoted (printable ASCII as is, others as \\xNN), and the admin
    port question for HTTP/ only."""
    error = errors.NotMonolock("127.0.0.1:7118", sent)
    assert str(error) == (
        f"monolock: 127.0.0.1:7118 does not speak the monolock protocol (it sent {quoted}"
    )
    assert isinstance(error, errors.ProtocolViolation) and not error.temporary
    assert error.sent == sent[:12]


TEMPORARY = load_spec("vectors/temporary.json")


@pytest.mark.parametrize("case", TEMPORARY["cases"], ids=lambda c: c["error"])
def test_temporary_vector(case: dict[str, Any]) -> None:
    """spec/vectors/temporary.json: the flag of errors that carry no code."""
    error: errors.MonolockError
    if case["error"] == "not_monolock":
        error = errors.NotMonolock("127.0.0.1:7118", b"HTTP/1.1 400")
    elif case["error"] == "config":
        with pytest.raises(errors.ConfigError) as info:
            monolock.Client("http://127.0.0.1:7117")
        error = info.value
    else:
        pytest.fail(f"spec/vectors/temporary.json: unknown error {case['error']!r}")
    assert error.temporary is case["temporary"]


MESSAGES = load_spec("vectors/messages.json")


@pytest.mark.parametrize("case", MESSAGES["server_errors"], ids=lambda c: f"0x{c['code']:02x}")
def test_server_error_messages(case: dict[str, Any]) -> None:
    """spec/vectors/messages.json: a server's ERROR in the words of every client."""
    assert str(errors.error_for_code(case["code"], case["reason"])) == case["message"]


@pytest.mark.parametrize("case", MESSAGES["acquire_timeouts"], ids=lambda c: c["message"])
def test_acquire_timeout_messages(case: dict[str, Any]) -> None:
    """spec/vectors/messages.json: a passed deadline names the lock."""
    last = None
    if "last_code" in case:
        last = errors.error_for_code(case["last_code"], case["last_reason"])
    assert str(timeout_error(case["name"], last)) == case["message"]


@pytest.mark.parametrize("case", MESSAGES["busy"], ids=lambda c: c["message"])
def test_busy_messages(case: dict[str, Any]) -> None:
    """spec/vectors/messages.json: a try-acquire's busy lock says what kept
    the claim out."""
    error = errors.LockBusy(case["name"], shared=case["shared"], limit=case["limit"])
    assert str(error) == case["message"]
    assert (error.name, error.shared, error.limit) == (case["name"], case["shared"], case["limit"])
    assert error.temporary and error.code is None


def test_not_active_reason_is_the_active_server() -> None:
    """0x03's reason is an address: the error keeps it as the reason, and a
    plain ServerError of that code says it the same way."""
    error = errors.error_for_code(0x03, "b:1")
    assert isinstance(error, errors.NotActive) and error.reason == "b:1" and error.temporary
    assert str(errors.ServerError(0x03, "b:1")) == str(error)
