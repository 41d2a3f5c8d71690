"""The sans-IO session: reply accounting, heartbeat timing, the client
timeout and validity, driven with a fake clock."""

from __future__ import annotations

import pytest

from monolock import _protocol as proto
from monolock import errors
from monolock._session import Failed, Granted, Phase, Queued, Session

WAITING = bytes([0x11])
LEASE_MS = 1000  # base interval 0.25 s, client timeout 0.8 s


def acquired(token: int) -> bytes:
    return proto.encode_acquired(token)


def started(try_only: bool = False, now: float = 100.0) -> Session:
    s = Session(b"jobs/x", LEASE_MS, try_only=try_only)
    s.start(now)
    assert s.data_to_send() == proto.encode_acquire(b"jobs/x", LEASE_MS)
    return s


def test_grant_at_acquire() -> None:
    s = started()
    assert s.next_wakeup() == pytest.approx(100.8)  # only the timeout while in flight
    assert s.receive_data(acquired(7), 100.01) == [Granted(7)]
    assert s.phase is Phase.HELD and s.token == 7
    assert s.expires_at == pytest.approx(100.8)  # from the ACQUIRE's send
    # Next heartbeat: send-to-send interval minus 2*srtt (srtt = 10 ms).
    assert s.next_wakeup() == pytest.approx(100.0 + 0.25 - 0.02)


def test_heartbeat_schedule_and_validity() -> None:
    s = started()
    s.receive_data(acquired(1), 100.0)
    assert s.tick(100.2) == [] and s.data_to_send() == b""
    assert s.tick(100.25) == [] and s.data_to_send() == b"\x02"
    # One in flight: nothing more, however late the ack.
    assert s.tick(100.6) == [] and s.data_to_send() == b""
    assert s.next_wakeup() == pytest.approx(100.8)
    # The late ack moves validity to the heartbeat's send and triggers the
    # next heartbeat at once, since its interval has already passed.
    assert s.receive_data(acquired(1), 100.7) == []
    assert s.expires_at == pytest.approx(100.25 + 0.8)
    assert s.data_to_send() == b"\x02"


def test_client_timeout_when_ack_never_comes() -> None:
    s = started()
    s.receive_data(acquired(1), 100.0)
    s.tick(100.25)
    assert s.data_to_send() == b"\x02"
    assert s.tick(100.79) == []
    (event,) = s.tick(100.8)
    assert isinstance(event, Failed) and isinstance(event.error, errors.HeartbeatTimeout)
    assert s.closed and s.next_wakeup() is None
    # Nothing after the end.
    assert s.receive_data(acquired(1), 100.9) == [] and s.tick(101) == []


def test_bytes_read_after_the_deadline_do_not_save_the_lock() -> None:
    s = started()
    s.receive_data(acquired(1), 100.0)
    s.tick(100.25)
    (event,) = s.receive_data(acquired(1), 100.81)
    assert isinstance(event, Failed) and isinstance(event.error, errors.HeartbeatTimeout)


def test_waiting_then_promotion() -> None:
    s = started()
    assert s.receive_data(WAITING, 100.001) == [Queued()]
    assert s.phase is Phase.WAITING
    # Heartbeats run while waiting; their acks are WAITING.
    s.tick(100.25)
    assert s.data_to_send() == b"\x02"
    assert s.receive_data(WAITING, 100.251) == []
    assert s.expires_at == pytest.approx(100.25 + 0.8)
    assert s.receive_data(acquired(9), 100.3) == [Granted(9)]
    assert s.held


def test_promotion_during_in_flight_heartbeat_is_not_its_ack() -> None:
    s = started()
    s.receive_data(WAITING, 100.0)
    s.tick(100.25)
    assert s.data_to_send() == b"\x02"
    # The promotion arrives while the heartbeat is in flight ...
    assert s.receive_data(acquired(5), 100.26) == [Granted(5)]
    # ... and does not extend validity: still the ACQUIRE's send + 0.8.
    assert s.expires_at == pytest.approx(100.8)
    assert s.tick(100.7) == [] and s.data_to_send() == b""  # still one in flight
    # The heartbeat's ack follows, with the same token.
    assert s.receive_data(acquired(5), 100.3) == []
    assert s.expires_at == pytest.approx(100.25 + 0.8)


def test_promotion_and_ack_in_one_read() -> None:
    s = started()
    s.receive_data(WAITING, 100.0)
    s.tick(100.25)
    s.data_to_send()
    assert s.receive_data(acquired(5) + acquired(5), 100.26) == [Granted(5)]
    assert s.expires_at == pytest.approx(100.25 + 0.8)


def test_promotion_with_in_flight_heartbeat_times_out_without_the_ack() -> None:
    s = started()
    s.receive_data(WAITING, 100.0)
    s.tick(100.25)
    s.data_to_send()
    s.receive_data(acquired(5), 100.26)
    (event,) = s.tick(100.8)
    assert isinstance(event, Failed) and isinstance(event.error, errors.HeartbeatTimeout)


def test_ack_then_promotion() -> None:
    s = started()
    s.receive_data(WAITING, 100.0)
    s.tick(100.25)
    s.data_to_send()
    assert s.receive_data(WAITING + acquired(3), 100.26) == [Granted(3)]
    assert s.expires_at == pytest.approx(100.25 + 0.8)


@pytest.mark.parametrize(
    "reply",
    [WAITING, acquired(1)],
    ids=["waiting", "acquired"],
)
def test_unsolicited_reply_while_held_is_a_violation(reply: bytes) -> None:
    s = started()
    s.receive_data(acquired(1), 100.0)
    (event,) = s.receive_data(reply, 100.1)
    assert isinstance(event, Failed) and isinstance(event.error, errors.ProtocolViolation)


def test_unsolicited_waiting_while_waiting_is_a_violation() -> None:
    s = started()
    s.receive_data(WAITING, 100.0)
    (event,) = s.receive_data(WAITING, 100.1)
    assert isinstance(event, Failed) and isinstance(event.error, errors.ProtocolViolation)


def test_changed_token_is_a_violation() -> None:
    s = started()
    s.receive_data(acquired(1), 100.0)
    s.tick(100.25)
    s.data_to_send()
    (event,) = s.receive_data(acquired(2), 100.26)
    assert isinstance(event, Failed) and isinstance(event.error, errors.ProtocolViolation)


def test_unknown_message_type_is_a_violation() -> None:
    s = started()
    (event,) = s.receive_data(b"\x7f", 100.0)
    assert isinstance(event, Failed) and isinstance(event.error, errors.ProtocolViolation)


@pytest.mark.parametrize("code", [0x01, 0x02, 0x05, 0x15, 0x18, 0x7E])
def test_error_frame_ends_the_session(code: int) -> None:
    s = started()
    s.receive_data(acquired(1), 100.0)
    (event,) = s.receive_data(proto.encode_error(code, "why"), 100.1)
    assert isinstance(event, Failed) and isinstance(event.error, errors.ServerError)
    assert event.error.code == code and event.error.temporary is (code < 0x10)
    assert event.error.from_server


def test_error_split_over_reads() -> None:
    s = started()
    frame = proto.encode_error(0x02, "closed by administrator")
    for i in range(len(frame) - 1):
        assert s.receive_data(frame[i : i + 1], 100.0) == []
    (event,) = s.receive_data(frame[-1:], 100.0)
    assert isinstance(event, Failed) and isinstance(event.error, errors.AdminClosed)


def test_try_acquire_closes_on_waiting() -> None:
    s = started(try_only=True)
    (event,) = s.receive_data(WAITING, 100.0)
    assert isinstance(event, Failed) and isinstance(event.error, errors.LockBusy)
    assert s.closed


def test_connection_lost() -> None:
    s = started()
    s.receive_data(acquired(1), 100.0)
    cause = ConnectionResetError("reset")
    (event,) = s.connection_lost(cause)
    assert isinstance(event, Failed) and isinstance(event.error, errors.ConnectionClosed)
    assert event.error.__cause__ is cause


def test_owner_close_reports_nothing() -> None:
    s = started()
    s.receive_data(acquired(1), 100.0)
    s.close()
    assert s.connection_lost() == [] and s.tick(200) == [] and s.data_to_send() == b""


def test_interval_follows_rtt() -> None:
    s = started()
    s.receive_data(acquired(1), 100.04)  # RTT 40 ms: interval 250 - 80 = 170 ms
    assert s.next_wakeup() == pytest.approx(100.17)
    s.tick(100.17)
    assert s.data_to_send() == b"\x02"


def test_heartbeat_due_at_once_when_rtt_eats_the_interval() -> None:
    s = started()
    s.receive_data(acquired(1), 100.2)  # 2 * srtt > base interval
    assert s.data_to_send() == b"\x02"


def test_acquire_frame_queued_once() -> None:
    s = Session(b"a", 1000)
    with pytest.raises(RuntimeError):
        s.start(1.0)
        s.start(2.0)
