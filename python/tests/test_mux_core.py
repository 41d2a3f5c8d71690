"""The sans-IO session core (protocol version 4) with a fake clock: the
handshake, streams, reply accounting, the shared deadline, and "tell every
loss, then close"."""

from __future__ import annotations

import pytest

from monolock import _mux_protocol as mp
from monolock import _protocol as proto
from monolock import _watch_protocol as wp
from monolock import errors
from monolock._mux import (
    Changed,
    ClaimStream,
    Ended,
    Lost,
    MuxCore,
    MuxEvent,
    MuxPhase,
    Ready,
    StreamPhase,
)
from monolock._session import Close, Send

MS = 1_000_000
LEASE_MS = 1000  # heartbeat every 250 ms, deadline 800 ms after the send, close at 1000 ms
WAITING = bytes([proto.MSG_WAITING])


def sent(events: list[MuxEvent]) -> bytes:
    return b"".join(e.data for e in events if isinstance(e, Send))


def kinds(events: list[MuxEvent]) -> list[str]:
    return [type(e).__name__ for e in events]


def ready_core(now: int = 0) -> MuxCore:
    core = MuxCore(LEASE_MS, server="s:1")
    assert sent(core.start(now)) == mp.encode_session(LEASE_MS)
    events = core.receive_data(mp.encode_session_ok(10), now)  # RTT 0: interval 250 ms
    assert events == [Ready(10)]
    return core


def claim(core: MuxCore, name: str = "a", **kw: object) -> ClaimStream:
    args: dict[str, object] = {"shared": False, "limit": 0, "value": b"", "try_only": False}
    args.update(kw)
    return core.open(proto.encode_name(name), **args)  # type: ignore[arg-type]


def granted(core: MuxCore, name: str, token: int, now: int) -> ClaimStream:
    stream = claim(core, name)
    out = core.tick(now)
    assert sent(out) == mp.encode_open(
        stream.id, proto.encode_acquire(proto.encode_name(name), LEASE_MS)
    )
    core.receive_data(mp.encode_stream(stream.id, proto.encode_acquired(token)), now)
    assert stream.held and stream.token == token
    return stream


def test_stream_ids_start_at_1_and_increase() -> None:
    core = ready_core()
    streams = [claim(core, f"n{i}") for i in range(3)]
    assert [s.id for s in streams] == [1, 2, 3]
    out = core.tick(2 * MS)
    assert [e for e in out if isinstance(e, Send)] == [
        Send(
            b"".join(
                mp.encode_open(s.id, proto.encode_acquire(proto.encode_name(s.name), LEASE_MS))
                for s in streams
            )
        )
    ]
    streams[0].release()
    assert claim(core, "n3").id == 4  # never reused


def test_opens_wait_for_session_ok() -> None:
    core = MuxCore(LEASE_MS)
    core.start(0)
    with pytest.raises(errors.ConnectionClosed):
        claim(core)


def test_one_heartbeat_in_flight_and_alive_moves_the_deadline() -> None:
    core = ready_core()
    a = granted(core, "a", 7, 2 * MS)
    assert core.expires_at == 800 * MS  # SESSION's send + 0.8 x lease
    assert core.tick(249 * MS) == []
    assert sent(core.tick(250 * MS)) == proto.HEARTBEAT_FRAME
    assert core.tick(700 * MS) == []  # the reply is owed: no second heartbeat
    assert (
        sent(core.receive_data(mp.ALIVE_FRAME, 705 * MS)) == proto.HEARTBEAT_FRAME
    )  # overdue: at once
    assert core.expires_at == (250 + 800) * MS
    assert a.expires_at == core.expires_at and a.poll(1049 * MS) is None


def test_a_stream_frame_does_not_vouch() -> None:
    core = ready_core()
    a = granted(core, "a", 7, 2 * MS)
    core.tick(250 * MS)  # heartbeat in flight
    b = claim(core, "b")
    core.tick(300 * MS)
    core.receive_data(mp.encode_stream(b.id, proto.encode_acquired(8)), 700 * MS)
    assert core.expires_at == 800 * MS
    assert a.poll(800 * MS) is not None  # the deadline, to the nanosecond


def test_deadline_loses_every_held_claim_told_before_the_close() -> None:
    core = ready_core()
    a = granted(core, "a", 7, 2 * MS)
    b = granted(core, "b", 8, 2 * MS)
    c = claim(core, "c")
    core.tick(3 * MS)
    core.receive_data(mp.encode_stream(c.id, WAITING), 3 * MS)
    d = granted(core, "d", 9, 4 * MS)
    d.release()
    core.tick(5 * MS)
    core.tick(250 * MS)  # heartbeat, never answered
    out = core.tick(800 * MS)
    assert kinds(out) == ["Lost", "Lost", "Changed", "Changed", "Ended"]
    assert [e.stream for e in out if isinstance(e, Lost)] == [a, b]
    assert isinstance(a.loss, errors.LockLost) and isinstance(a.loss.cause, errors.HeartbeatTimeout)
    assert c.phase is StreamPhase.FAILED and isinstance(c.error, errors.HeartbeatTimeout)
    assert d.loss is None and d.released_acked  # released claims are not reported lost
    assert core.phase is MuxPhase.LOST and core.next_wakeup() == 1000 * MS
    assert core.receive_data(mp.ALIVE_FRAME, 900 * MS) == []  # a late ack revives nothing
    assert core.tick(999 * MS) == []
    assert core.tick(1000 * MS) == [Close(False)]


def test_a_poll_decides_the_loss_and_the_next_input_tells_it() -> None:
    core = ready_core()
    a = granted(core, "a", 7, 2 * MS)
    assert a.poll(799 * MS) is None
    assert a.poll(800 * MS) is not None
    assert core.next_wakeup() == 0
    assert kinds(core.tick(800 * MS)) == ["Lost", "Ended"]


def test_connection_end_tells_every_loss_then_closes() -> None:
    core = ready_core()
    a = granted(core, "a", 7, 2 * MS)
    out = core.connection_lost(ConnectionResetError("reset"))
    assert kinds(out) == ["Lost", "Ended", "Close"]
    assert isinstance(a.loss, errors.LockLost) and isinstance(a.loss.cause, errors.ConnectionClosed)
    with pytest.raises(errors.ConnectionClosed):
        claim(core)


@pytest.mark.parametrize(
    ("data", "code"), [(b"\x13", None), (b"\x13\x01", 1), (proto.encode_error(2, "kicked"), 2)]
)
def test_an_error_ends_the_session_at_its_type_byte(data: bytes, code: int | None) -> None:
    core = ready_core()
    a = granted(core, "a", 7, 2 * MS)
    b = granted(core, "b", 8, 2 * MS)
    out = core.receive_data(data, 3 * MS)
    assert kinds(out) == ["Lost", "Lost", "Ended", "Close"]
    assert a.loss is not None and b.loss is not None
    assert a.loss.code == code


def test_stream_end_loses_one_claim_and_the_session_lives_on() -> None:
    core = ready_core()
    a = granted(core, "a", 7, 2 * MS)
    b = granted(core, "b", 8, 2 * MS)
    out = core.receive_data(mp.encode_stream_end(a.id, 0x02, "closed by administrator"), 3 * MS)
    assert kinds(out) == ["Lost"]
    assert a.loss is not None and isinstance(a.loss.cause, errors.AdminClosed)
    assert a.loss.temporary and b.held and core.ready
    assert a.expires_at == 800 * MS  # frozen at the loss
    core.tick(250 * MS)
    core.receive_data(mp.ALIVE_FRAME, 251 * MS)
    assert a.expires_at == 800 * MS and b.expires_at == 1050 * MS
    a.release()
    assert a.released_acked and core.tick(252 * MS) == []  # nothing to send for an ended stream


@pytest.mark.parametrize(
    ("code", "cls"), [(0x05, errors.TooManyStreams), (0x18, errors.NotAuthorized)]
)
def test_stream_end_of_an_opening_claim_fails_it_with_its_class(code: int, cls: type) -> None:
    core = ready_core()
    a = claim(core)
    core.tick(2 * MS)
    assert kinds(core.receive_data(mp.encode_stream_end(a.id, code, ""), 3 * MS)) == ["Changed"]
    assert a.phase is StreamPhase.FAILED and type(a.error) is cls and core.ready


def test_try_only_on_waiting_releases_and_is_busy() -> None:
    core = ready_core()
    a = claim(core, "a", try_only=True, shared=True, limit=3)
    core.tick(2 * MS)
    out = core.receive_data(mp.encode_stream(a.id, WAITING), 3 * MS)
    assert sent(out) == mp.encode_release(a.id)
    assert isinstance(a.error, errors.LockBusy) and a.settled and a.token is None
    assert str(a.error) == 'monolock: all 3 permits of "a" are taken'
    # The grant that crossed the RELEASE is dropped; RELEASED ends it.
    assert kinds(core.receive_data(mp.encode_stream(a.id, proto.encode_acquired(5)), 4 * MS)) == []
    assert a.token is None
    core.receive_data(mp.encode_released(a.id), 5 * MS)
    assert a.released_acked and core.open_streams == 0


def test_waiting_then_promotion() -> None:
    core = ready_core()
    a = claim(core)
    core.tick(2 * MS)
    core.receive_data(mp.encode_stream(a.id, WAITING), 3 * MS)
    assert a.phase is StreamPhase.WAITING and not a.settled
    core.receive_data(mp.encode_stream(a.id, proto.encode_acquired(11)), 4 * MS)
    assert a.held and a.token == 11


def test_release_drops_later_frames_and_waits_for_released() -> None:
    core = ready_core()
    a = granted(core, "a", 7, 2 * MS)
    a.release()
    assert a.closed and not a.released_acked
    assert sent(core.tick(3 * MS)) == mp.encode_release(a.id)
    assert core.receive_data(mp.encode_stream_end(a.id, 2, ""), 4 * MS) == []  # crossed
    assert core.receive_data(mp.encode_released(a.id), 5 * MS) == [Changed(a.id)]
    assert a.released_acked and a.loss is None
    with pytest.raises(errors.ProtocolViolation):
        mp.SessionDecoder().feed(b"\x7f")
    # A second RELEASED of it breaks the protocol: the session ends.
    assert kinds(core.receive_data(mp.encode_released(a.id), 6 * MS)) == ["Ended", "Close"]
    assert isinstance(core.error, errors.ProtocolViolation)


def test_proclaim_sends_on_and_its_answer_acknowledges_it() -> None:
    core = ready_core()
    a = claim(core, "a", value=b"v1")
    core.tick(2 * MS)
    core.receive_data(mp.encode_stream(a.id, proto.encode_acquired(3)), 3 * MS)
    assert core.proclaim(a, b"v2") == 1
    assert sent(core.tick(4 * MS)) == mp.encode_on(a.id, b"v2")
    assert a.value == b"v1" and a.proclaimed == 0
    core.receive_data(mp.encode_stream(a.id, proto.encode_acquired(3)), 5 * MS)
    assert a.value == b"v2" and a.proclaimed == 1
    # An answer nobody asked for, or another token, ends the session.
    out = core.receive_data(mp.encode_stream(a.id, proto.encode_acquired(3)), 6 * MS)
    assert kinds(out) == ["Lost", "Ended", "Close"]


@pytest.mark.parametrize(
    "data",
    [
        mp.ALIVE_FRAME,  # no heartbeat in flight
        mp.encode_session_ok(3),
        mp.encode_stream(9, WAITING),  # never opened
        mp.encode_stream(0, WAITING),
        mp.encode_released(1),  # never released
    ],
    ids=["alive unasked", "second session ok", "unknown stream", "stream 0", "released unasked"],
)
def test_violations_end_the_session(data: bytes) -> None:
    core = ready_core()
    a = granted(core, "a", 7, 2 * MS)
    out = core.receive_data(data, 3 * MS)
    assert kinds(out) == ["Lost", "Ended", "Close"]
    assert a.loss is not None and isinstance(a.loss.cause, errors.ProtocolViolation)


@pytest.mark.parametrize(
    ("code", "cls"), [(0x10, errors.UnsupportedVersion), (0x13, errors.UnknownMessage)]
)
def test_an_old_server_says_it_does_not_support_sessions(code: int, cls: type) -> None:
    core = MuxCore(LEASE_MS, server="s:1")
    core.start(0)
    out = core.receive_data(proto.encode_error(code, "unknown message type: 0x05"), MS)
    assert kinds(out) == ["Ended", "Close"]
    assert core.error is not None and type(core.error) is cls and core.error.code == code
    assert "server s:1 does not support sessions" in str(core.error)


def test_a_refusal_after_the_handshake_keeps_its_words() -> None:
    core = ready_core()
    core.receive_data(proto.encode_error(0x13, "unknown message type: 0x7f"), MS)
    assert str(core.error) == "monolock: unknown message type: 0x7f (0x13)"


def test_not_monolock() -> None:
    core = MuxCore(LEASE_MS, server="s:1")
    core.start(0)
    core.receive_data(b"HTTP/1.1 400", MS)
    assert isinstance(core.error, errors.NotMonolock)


def test_no_session_ok_within_the_client_timeout_fails() -> None:
    core = MuxCore(LEASE_MS)
    core.start(0)
    assert core.next_wakeup() == 800 * MS
    assert kinds(core.tick(800 * MS)) == ["Ended"]
    assert isinstance(core.error, errors.HeartbeatTimeout)
    assert core.phase is MuxPhase.LOST and core.next_wakeup() == 1000 * MS
    assert core.tick(999 * MS) == []
    assert core.tick(1000 * MS) == [Close(False)]  # kept until the lease's end


def test_an_owner_closes_a_session_that_never_became_ready_at_once() -> None:
    core = MuxCore(LEASE_MS)
    core.start(0)
    core.tick(800 * MS)
    core.close()
    assert core.tick(801 * MS) == [Close(False)]


def test_close_releases_everything_without_a_loss() -> None:
    core = ready_core()
    a = granted(core, "a", 7, 2 * MS)
    core.close()
    out = core.tick(3 * MS)
    assert out == [Close(True)]  # valid: the owner waits for the server's close
    assert a.loss is None and a.closed and a.released_acked
    assert core.connection_lost(None) == []


def test_session_end_fails_a_waiting_claim() -> None:
    core = ready_core()
    a = claim(core)
    core.tick(2 * MS)
    core.receive_data(mp.encode_stream(a.id, WAITING), 3 * MS)
    assert kinds(core.connection_lost(None)) == ["Changed", "Ended", "Close"]
    assert isinstance(a.error, errors.ConnectionClosed)
    assert isinstance(Ended(a.error).error, errors.ConnectionClosed)


# -- watch streams ----------------------------------------------------------------


def watch_frames(stream: int, epoch: int = 5, seq: int = 7) -> bytes:
    """A fresh watch's answer: an empty snapshot, its end, WATCHING."""
    return b"".join(
        mp.encode_stream(stream, frame)
        for frame in (
            wp.encode_event(wp.Event(epoch, seq, wp.EVENT_SNAPSHOT)),
            wp.encode_event(wp.Event(epoch, seq, wp.EVENT_SNAPSHOT_END)),
            wp.encode_watching(epoch, seq),
        )
    )


def test_a_watch_is_vouched_for_by_its_watching_then_by_alive() -> None:
    core = ready_core()
    w = core.open_watch(proto.encode_name("w"))
    out = core.tick(10 * MS)
    assert sent(out) == mp.encode_open(w.id, wp.encode_watch(b"w", LEASE_MS))
    assert not w.state(10 * MS).known
    core.receive_data(watch_frames(w.id), 20 * MS)
    state = w.state(20 * MS)
    assert state.known and (state.epoch, state.seq) == (5, 7) and state.holders == ()
    assert state.valid_until == 0.81  # the OPEN's send + 0.8 x lease
    # A grant, then the heartbeat's ALIVE vouches for it.
    granted = wp.Event(5, 8, wp.EVENT_GRANTED, arrival=1, token=9, identity="me")
    core.receive_data(mp.encode_stream(w.id, wp.encode_event(granted)), 30 * MS)
    assert sent(core.tick(250 * MS)) == proto.HEARTBEAT_FRAME
    assert kinds(core.receive_data(mp.ALIVE_FRAME, 260 * MS)) == ["Changed"]
    state = w.state(260 * MS)
    assert state.known and state.valid_until == 1.05 and state.holders[0].token == 9
    assert not w.state(1050 * MS).known  # the session's deadline is the watch's


def test_a_watch_before_its_first_watching_is_not_vouched_by_alive() -> None:
    core = ready_core()
    w = core.open_watch(proto.encode_name("w"))
    core.tick(10 * MS)
    core.tick(250 * MS)
    core.receive_data(mp.ALIVE_FRAME, 260 * MS)
    assert not w.state(260 * MS).known and not w.vouched


def test_a_watch_behind_ends_alone() -> None:
    core = ready_core()
    a = granted(core, "a", 7, 10 * MS)
    w = core.open_watch(proto.encode_name("w"))
    core.tick(11 * MS)
    core.receive_data(watch_frames(w.id), 20 * MS)
    core.receive_data(mp.encode_stream_end(w.id, 0x04, "watcher fell behind"), 30 * MS)
    assert isinstance(w.error, errors.WatcherBehind) and not w.state(30 * MS).known
    assert a.held and core.ready


def test_a_gap_in_a_watch_ends_the_session() -> None:
    core = ready_core()
    w = core.open_watch(proto.encode_name("w"))
    core.tick(10 * MS)
    core.receive_data(watch_frames(w.id), 20 * MS)
    gap = wp.Event(5, 9, wp.EVENT_LEFT, arrival=1)  # seq 8 is missing
    out = core.receive_data(mp.encode_stream(w.id, wp.encode_event(gap)), 30 * MS)
    assert kinds(out)[-2:] == ["Ended", "Close"]
    assert isinstance(core.error, errors.ProtocolViolation) and not w.state(30 * MS).known


def test_a_released_watch_drops_its_frames() -> None:
    core = ready_core()
    w = core.open_watch(proto.encode_name("w"))
    core.tick(10 * MS)
    core.release_watch(w)
    assert sent(core.tick(11 * MS)) == mp.encode_release(w.id)
    assert core.receive_data(watch_frames(w.id), 20 * MS) == []
    core.receive_data(mp.encode_released(w.id), 21 * MS)
    assert core.open_streams == 0 and w.error is None
