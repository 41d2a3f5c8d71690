"""The sans-IO session: every case of spec/vectors/session.json, then reply
accounting, heartbeat timing, the loss decision shared with polling, and
the close after a loss, all with a fake clock (integer nanoseconds)."""

from __future__ import annotations

import ssl
import threading
from typing import Any

import pytest

from monolock import _protocol as proto
from monolock import errors
from monolock._session import (
    Close,
    Failed,
    Granted,
    Lost,
    Phase,
    Proclaimed,
    Queued,
    Send,
    Session,
    SessionEvent,
    client_timeout_text,
)

from .support import load_spec

SESSION = load_spec("vectors/session.json")
WAITING = bytes([0x11])
HEARTBEAT = proto.HEARTBEAT_FRAME
LEASE_MS = 1000  # base interval 250 ms, client timeout 800 ms, lease 1000 ms
MS = 1_000_000  # nanoseconds


# -- spec/vectors/session.json ---------------------------------------------------


def cause_kind(error: errors.MonolockError) -> str:
    """The cause word of a "lost ..." / "fail ..." output."""
    if isinstance(error, errors.ServerError):
        assert error.code is not None
        return f"server 0x{error.code:02x}"
    if isinstance(error, errors.ServerEnded):
        return "server"
    if isinstance(error, errors.HeartbeatTimeout):
        return "timeout"
    if isinstance(error, errors.ConnectionClosed):
        return "io"
    if isinstance(error, errors.ProtocolViolation):
        return "protocol"
    if isinstance(error, errors.LockBusy):
        return "busy"
    raise AssertionError(f"no vector word for {error!r}")


def describe(event: SessionEvent, acquire: bytes) -> str:
    """An event as the vectors' output string."""
    if isinstance(event, Send):
        return describe_send(event.data, acquire)
    if isinstance(event, Queued):
        return "waiting"
    if isinstance(event, Granted):
        return f"grant {event.token}"
    if isinstance(event, Proclaimed):
        return f"proclaimed {event.count}"
    if isinstance(event, Lost):
        return f"lost {cause_kind(event.error.cause)}"
    if isinstance(event, Failed):
        return f"fail {cause_kind(event.error)}"
    assert isinstance(event, Close)
    return "close"


def describe_send(data: bytes, acquire: bytes) -> str:
    """A written frame as the vectors' "send ..." output."""
    if data == acquire:
        return "send ACQUIRE"
    if data[0] == proto.MSG_PROCLAIM:
        value = data[3:]
        assert data == proto.encode_proclaim(value), data
        return f"send PROCLAIM {value.decode()}"
    assert data == HEARTBEAT, data
    return "send HEARTBEAT"


def frame_bytes(text: str) -> bytes:
    """The bytes of "WAITING", "ACQUIRED <token>" or "ERROR 0x<code>"."""
    kind, _, arg = text.partition(" ")
    if kind == "hex":
        return bytes.fromhex(arg)
    if kind == "WAITING":
        return WAITING
    if kind == "ACQUIRED":
        return proto.encode_acquired(int(arg))
    assert kind == "ERROR", text
    return proto.encode_error(int(arg, 16), "")


@pytest.mark.parametrize("case", SESSION["cases"], ids=lambda c: c["name"])
def test_session_vector(case: dict[str, Any]) -> None:
    claim = case.get("claim", {})
    shared, limit = claim.get("shared", False), claim.get("limit", 0)
    value = claim.get("value", "").encode()  # set: a version 3 ACQUIRE
    s = Session(
        b"a",
        case["lease_ms"],
        try_only=case["mode"] == "try",
        shared=shared,
        limit=limit,
        value=value,
    )
    acquire = proto.encode_claim(b"a", case["lease_ms"], shared, limit, value)
    for step in case["steps"]:
        now = step["at"] * MS
        kind = step["in"]
        out: list[SessionEvent]
        if kind == "connect":
            out = s.start(now)
        elif kind.startswith("recv "):
            out = s.receive_data(frame_bytes(kind[5:]), now)
        elif kind == "eof":
            out = s.connection_lost()
        elif kind == "release":
            s.release()
            out = []
        elif kind.startswith("proclaim "):
            s.proclaim(kind[9:].encode())
            out = []
        else:
            assert kind == "timer", kind
            out = []
        out += s.tick(now)  # this core separates input from time: tick at `at`
        where = f"{case['name']} at {step['at']} {kind}"
        assert [describe(e, acquire) for e in out] == step["out"], where
        if "state" in step:
            assert s.phase.value == step["state"], where
        if "valid_until" in step:
            assert s.expires_at == step["valid_until"] * MS, where


def test_vectors_cover_every_output() -> None:
    words: set[str] = set()
    for case in SESSION["cases"]:
        for step in case["steps"]:
            words.update(o.split(" ")[0] for o in step["out"])
    assert words == {"send", "waiting", "grant", "proclaimed", "lost", "fail", "close"}


# -- more of the same core ----------------------------------------------------------


def started(try_only: bool = False, now: int = 100 * MS) -> Session:
    s = Session(b"jobs/x", LEASE_MS, try_only=try_only)
    assert s.start(now) == [Send(proto.encode_acquire(b"jobs/x", LEASE_MS))]
    return s


def held(now: int = 100 * MS) -> Session:
    s = started(now=now)
    assert s.receive_data(proto.encode_acquired(1), now) == [Granted(1)]
    return s


def only(events: list[SessionEvent], cls: type[Any]) -> Any:
    (event,) = events
    assert isinstance(event, cls), events
    return event


def test_grant_at_acquire() -> None:
    s = started()
    assert s.next_wakeup() == 900 * MS  # only the timeout while in flight
    assert s.receive_data(proto.encode_acquired(7), 110 * MS) == [Granted(7)]
    assert s.phase is Phase.HELD and s.token == 7
    assert s.expires_at == 900 * MS  # from the ACQUIRE's send
    # Next heartbeat: send-to-send interval minus 2*srtt (srtt = 10 ms).
    assert s.next_wakeup() == (100 + 250 - 20) * MS


def test_promotion_and_ack_in_one_read() -> None:
    s = started()
    s.receive_data(WAITING, 100 * MS)
    assert s.tick(350 * MS) == [Send(HEARTBEAT)]
    out = s.receive_data(proto.encode_acquired(5) * 2, 360 * MS)
    assert out == [Granted(5)]
    assert s.expires_at == (350 + 800) * MS


def test_ack_then_promotion() -> None:
    s = started()
    s.receive_data(WAITING, 100 * MS)
    s.tick(350 * MS)
    assert s.receive_data(WAITING + proto.encode_acquired(3), 360 * MS) == [Granted(3)]
    assert s.expires_at == (350 + 800) * MS


def test_unsolicited_waiting_while_waiting_is_a_violation() -> None:
    s = started()
    s.receive_data(WAITING, 100 * MS)
    failed, close = s.receive_data(WAITING, 110 * MS)
    assert isinstance(failed, Failed) and isinstance(failed.error, errors.ProtocolViolation)
    assert close == Close()


def test_unknown_message_type_is_a_violation() -> None:
    s = started()
    s.receive_data(WAITING, 100 * MS)
    failed, _ = s.receive_data(b"\x7f", 110 * MS)
    assert isinstance(failed, Failed) and isinstance(failed.error, errors.ProtocolViolation)
    assert not isinstance(failed.error, errors.NotMonolock)


@pytest.mark.parametrize(
    ("first", "quoted"),
    [
        (b"HTTP/1.1 400 Bad Request\r\n", '"HTTP/1.1 400…"); is this the admin port?'),
        (b"\x15\x03\x03\x00\x02", '"\\x15\\x03\\x03\\x00\\x02")'),
        (b'SSH-2.0 "x"\\', '"SSH-2.0 \\x22x\\x22\\x5c")'),
    ],
    ids=["http", "tls-alert", "escapes"],
)
def test_a_first_byte_that_starts_no_message_is_not_monolock(first: bytes, quoted: str) -> None:
    s = Session(b"a", LEASE_MS, server="127.0.0.1:7118")
    s.start(0)
    failed, close = s.receive_data(first, 1 * MS)
    assert isinstance(failed, Failed) and close == Close()
    error = failed.error
    assert isinstance(error, errors.NotMonolock) and isinstance(error, errors.ProtocolViolation)
    assert str(error).startswith("monolock: 127.0.0.1:7118 does not speak the monolock protocol")
    assert str(error).endswith(f"(it sent {quoted}")
    assert str(error).count("monolock: ") == 1 and error.sent == first[:12]


@pytest.mark.parametrize("code", [0x01, 0x02, 0x09, 0x15, 0x18, 0x7E])
def test_error_frame_while_held_is_told_then_closed(code: int) -> None:
    s = held()
    lost, close = s.receive_data(proto.encode_error(code, "why"), 110 * MS)
    assert isinstance(lost, Lost) and close == Close()
    cause = lost.error.cause
    assert isinstance(cause, errors.ServerError) and cause.from_server
    assert cause.code == code and cause.temporary is (code < 0x10)
    assert lost.error.token == 1 and s.loss is lost.error


def test_error_ends_the_session_at_its_type_byte() -> None:
    frame = proto.encode_error(0x02, "closed by administrator")
    s = started()
    failed, close = s.receive_data(frame[:2], 100 * MS)  # the reason never waited for
    assert isinstance(failed, Failed) and isinstance(failed.error, errors.AdminClosed)
    assert isinstance(close, Close)
    assert s.receive_data(frame[2:], 100 * MS) == []
    s = started()
    failed, close = s.receive_data(frame[:1], 100 * MS)
    assert isinstance(failed, Failed) and isinstance(failed.error, errors.ServerEnded)
    assert failed.error.code is None and isinstance(close, Close)


def test_connection_lost_keeps_the_cause() -> None:
    s = held()
    cause = ConnectionResetError("reset")
    lost, _ = s.connection_lost(cause)
    assert isinstance(lost, Lost) and isinstance(lost.error.cause, errors.ConnectionClosed)
    assert lost.error.cause.__cause__ is cause


def _certificate_required() -> ssl.SSLError:
    exc = ssl.SSLError(
        1, "[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] tlsv13 alert certificate required"
    )
    exc.reason = "TLSV13_ALERT_CERTIFICATE_REQUIRED"
    return exc


def test_a_certificate_alert_before_any_reply_is_a_failed_handshake() -> None:
    """TLS 1.3 tells the server's refusal of this client's certificate on
    the first read, after ACQUIRE: a ConnectError of that server with the
    hint, not a dropped connection (tls_certificate_rule)."""
    s = Session(b"a", LEASE_MS, server="127.0.0.1:7117")
    s.start(0)
    cause = _certificate_required()
    failed, close = s.connection_lost(cause)
    assert isinstance(failed, Failed) and close == Close()
    error = failed.error
    assert isinstance(error, errors.ConnectError) and error.certificate == "client"
    assert not error.temporary and error.__cause__ is cause
    assert str(error) == (
        f"monolock: TLS handshake with 127.0.0.1:7117 failed: {cause} "
        "(the server refused this client's certificate: "
        "give a client certificate that its CA signs)"
    )


def test_a_certificate_alert_after_a_reply_is_a_dropped_connection() -> None:
    s = started()
    assert s.receive_data(bytes([proto.MSG_WAITING]), 110 * MS) == [Queued()]
    failed, _ = s.connection_lost(_certificate_required())
    assert isinstance(failed, Failed) and type(failed.error) is errors.ConnectionClosed


def test_heartbeat_due_at_once_when_rtt_eats_the_interval() -> None:
    s = started()
    assert s.receive_data(proto.encode_acquired(1), 300 * MS) == [Granted(1), Send(HEARTBEAT)]


def test_start_twice_is_a_bug() -> None:
    s = started()
    with pytest.raises(RuntimeError):
        s.start(200 * MS)


def test_release_before_connect_closes_nothing() -> None:
    s = Session(b"a", LEASE_MS)
    s.release()
    assert s.closed and s.start(0) == [] and s.tick(0) == []
    assert s.next_wakeup() is None


def test_release_of_a_held_lock_hands_back() -> None:
    s = held()
    s.release()
    assert s.next_wakeup() == 0  # at once
    assert s.tick(150 * MS) == [Close(handback=True)]
    assert s.loss is None and s.poll(2000 * MS) is None  # released, never lost


def test_release_after_loss_closes_without_handback() -> None:
    s = held()
    s.tick(350 * MS)
    assert isinstance(only(s.tick(900 * MS), Lost), Lost)
    s.release()
    assert s.tick(901 * MS) == [Close(handback=False)]


def test_nothing_after_close() -> None:
    s = held()
    s.release()
    s.tick(150 * MS)
    assert s.receive_data(proto.encode_acquired(1), 160 * MS) == []
    assert s.connection_lost() == [] and s.tick(5000 * MS) == []
    assert s.next_wakeup() is None


def test_after_loss_the_session_reads_on_and_ignores() -> None:
    s = held()
    assert s.tick(350 * MS) == [Send(HEARTBEAT)]
    only(s.tick(900 * MS), Lost)
    assert s.next_wakeup() == 1100 * MS  # ACQUIRE's send + lease
    assert s.receive_data(proto.encode_acquired(1) + WAITING, 950 * MS) == []
    assert s.receive_data(b"\x7f junk", 960 * MS) == []  # no longer parsed
    assert s.phase is Phase.LOST and s.expires_at == 900 * MS
    assert s.tick(1099 * MS) == []
    assert s.tick(1100 * MS) == [Close()]


# -- one loss decision, polled or pushed --------------------------------------------


def test_poll_decides_at_the_deadline_and_the_owner_then_tells() -> None:
    s = held()
    s.tick(350 * MS)  # heartbeat in flight, never acked
    assert s.poll(899 * MS) is None and s.held
    loss = s.poll(900 * MS)  # the owner has not ticked yet
    assert isinstance(loss, errors.LockLost) and isinstance(loss.cause, errors.HeartbeatTimeout)
    # The same words in every client: the timeout and the lease it comes from.
    assert str(loss.cause) == (
        "monolock: no reply from the server within 800 ms (0.8 x lease of 1000 ms)"
    )
    assert s.phase is Phase.LOST and s.poll(901 * MS) is loss
    assert s.next_wakeup() == 0  # the owner must tell at once
    # An ack the owner reads late (stamped before the deadline) changes nothing.
    assert s.receive_data(proto.encode_acquired(1), 899 * MS) == [Lost(loss)]
    assert s.expires_at == 900 * MS
    assert s.tick(902 * MS) == []  # told once
    assert s.next_wakeup() == 1100 * MS
    assert s.tick(1100 * MS) == [Close()]


def test_the_owner_decides_and_polls_see_the_same_loss() -> None:
    s = held()
    s.tick(350 * MS)
    lost = only(s.tick(900 * MS), Lost)
    assert s.poll(900 * MS) is lost.error


def test_no_loss_is_decided_after_release() -> None:
    s = held()
    s.release()
    assert s.poll(5000 * MS) is None
    assert s.tick(5000 * MS) == [Close(handback=False)]  # past the deadline: no handback


def test_an_undecided_loss_is_told_before_a_release_closes() -> None:
    s = held()
    assert s.poll(900 * MS) is not None
    s.release()
    lost, close = s.tick(901 * MS)
    assert isinstance(lost, Lost) and close == Close()


def test_eof_after_a_polled_loss_tells_then_closes() -> None:
    s = held()
    loss = s.poll(900 * MS)
    assert loss is not None
    assert s.connection_lost() == [Lost(loss), Close()]


def test_polls_from_threads_decide_once() -> None:
    s = held()
    seen: list[errors.LockLost | None] = []
    threads = [threading.Thread(target=lambda: seen.append(s.poll(900 * MS))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(loss) for loss in seen}) == 1 and seen[0] is not None
    assert s.tick(900 * MS) == [Lost(seen[0])]


@pytest.mark.parametrize(
    ("lease_ms", "text"),
    [(2000, "1600"), (1001, "800.8"), (1, "0.8"), (4294967295, "3435973836")],
)
def test_client_timeout_text_is_exact(lease_ms: int, text: str) -> None:
    """0.8 x lease in a loss message: exact, never rounded or an exponent."""
    assert client_timeout_text(lease_ms) == text


# -- shared claims (protocol version 2) --------------------------------------------


def test_shared_session_sends_the_v2_acquire_and_heartbeats_as_v1() -> None:
    session = Session(b"pool", LEASE_MS, shared=True, limit=3)
    assert session.shared and session.limit == 3
    assert session.start(0) == [Send(proto.encode_acquire_v2(b"pool", LEASE_MS, 1, 3))]
    assert session.receive_data(proto.encode_acquired(7), 1 * MS) == [Granted(7)]
    assert session.tick(250 * MS) == [Send(HEARTBEAT)]


def test_exclusive_session_sends_the_v1_acquire() -> None:
    session = Session(b"a", LEASE_MS)
    assert not session.shared and session.limit == 0
    assert session.start(0) == [Send(proto.encode_acquire(b"a", LEASE_MS))]


def test_unsupported_version_to_a_shared_claim_is_shared_unsupported() -> None:
    session = Session(b"r", LEASE_MS, shared=True, server="10.0.0.1:7117")
    session.start(0)
    out = session.receive_data(proto.encode_error(0x10, "unsupported protocol version"), MS)
    assert out[1:] == [Close()]
    assert isinstance(out[0], Failed)
    error = out[0].error
    assert type(error) is errors.SharedUnsupported
    assert isinstance(error, errors.UnsupportedVersion)
    assert error.code == 0x10 and error.from_server and not error.temporary
    assert error.address == "10.0.0.1:7117"
    assert error.reason == "unsupported protocol version"
    assert str(error) == (
        "monolock: server 10.0.0.1:7117 does not support shared locks or semaphores "
        "(it answered a protocol version 2 ACQUIRE with 0x10 unsupported protocol version); "
        "use an exclusive lock, or upgrade the server"
    )


def test_unsupported_version_to_an_exclusive_claim_stays_unsupported_version() -> None:
    session = Session(b"x", LEASE_MS)
    session.start(0)
    out = session.receive_data(proto.encode_error(0x10, ""), MS)
    assert isinstance(out[0], Failed) and type(out[0].error) is errors.UnsupportedVersion


# -- PROCLAIM (protocol version 3) ----------------------------------------------------


def valued_and_held(value: bytes = b"a") -> Session:
    s = Session(b"a", LEASE_MS, value=value)
    s.start(0)
    assert s.receive_data(proto.encode_acquired(7), 0) == [Granted(7)]
    return s


def test_the_value_changes_when_the_proclaim_is_acknowledged() -> None:
    s = valued_and_held()
    assert s.proclaim(b"b") == 1
    assert s.next_wakeup() == 0  # due at once: nothing is in flight
    assert s.tick(10 * MS) == [Send(proto.encode_proclaim(b"b"))]
    assert s.value == b"a" and s.proclaimed == 0  # sent, not acknowledged
    assert s.receive_data(proto.encode_acquired(7), 20 * MS) == [Proclaimed(1)]
    assert s.value == b"b" and s.proclaimed == 1 and s.valued
    # An empty value clears it; the claim may still proclaim.
    assert s.proclaim(b"") == 2
    assert s.tick(30 * MS) == [Send(proto.encode_proclaim(b""))]
    assert s.receive_data(proto.encode_acquired(7), 30 * MS) == [Proclaimed(2)]
    assert s.value == b"" and s.valued


def test_a_read_that_holds_a_reply_and_more_never_acknowledges_the_next_proclaim() -> None:
    """The PROCLAIM that waited for a reply goes after the whole read, so
    an extra ACQUIRED in that read is no ack of it: it breaks the protocol."""
    s = valued_and_held()
    assert s.tick(250 * MS) == [Send(HEARTBEAT)]
    s.proclaim(b"b")
    lost, close = s.receive_data(proto.encode_acquired(7) * 2, 260 * MS)
    assert isinstance(lost, Lost) and isinstance(lost.error.cause, errors.ProtocolViolation)
    assert close == Close() and s.proclaimed == 0


def test_nothing_is_proclaimed_once_let_go_or_lost() -> None:
    s = valued_and_held()
    s.release()
    assert s.proclaim(b"b") == 0
    s = valued_and_held()
    s.receive_data(proto.encode_error(0x02, ""), MS)
    assert s.proclaim(b"b") == 0 and s.closed


def test_a_claim_without_a_value_cannot_proclaim() -> None:
    s = held()
    with pytest.raises(RuntimeError):
        s.proclaim(b"b")


def test_the_core_takes_no_lock_and_does_no_io() -> None:
    """The session core is sans-IO, as Rust's ``core::Session`` is: its
    owner serializes the calls (the sync client through SerializedSession),
    so it imports nothing that locks, waits or talks to the network."""
    import ast
    from pathlib import Path

    import monolock._session as core

    tree = ast.parse(Path(core.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported.add(node.module.split(".")[0])
    assert imported.isdisjoint(
        {"threading", "socket", "ssl", "asyncio", "select", "selectors", "time"}
    ), imported
