"""Sessions (protocol version 4) of both APIs against a scripted server:
exact bytes, pipelining, release, refusals, losses told before the close."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Iterator
from typing import Any, Callable

import pytest

import monolock
from monolock import _mux_protocol as mp
from monolock import _protocol as proto
from monolock import _watch_protocol as wp
from monolock import errors
from monolock.aio import AsyncSession, AsyncSessionWatch

from .session_support import SessionConn, SessionHandle, open_session
from .support import Api, FakeServer, assert_on_time

LEASE = 1.0


Start = Callable[..., tuple[SessionHandle, SessionConn]]


@pytest.fixture
def start(api: Api, fake_server: FakeServer) -> Iterator[Start]:
    """Open sessions of the test's API on the fake server; each is closed
    at the end (before the API's loop stops)."""
    opened: list[SessionHandle] = []

    def open_one(max_streams: int = 100) -> tuple[SessionHandle, SessionConn]:
        fut = open_session(api, fake_server.address, lease=LEASE)
        conn = SessionConn(fake_server.accept())
        assert conn.handshake(max_streams) == 1000
        handle = fut.result(5)
        opened.append(handle)
        assert handle.session.max_streams == max_streams and handle.session.alive
        return handle, conn

    yield open_one
    for conn in fake_server.conns:
        conn.close()  # the server's close: close() does not wait for it
    for handle in opened:
        handle.close()


def test_exact_bytes_and_pipelined_grants(api: Api, start: Start) -> None:
    session, conn = start()
    futs = [session.acquire(f"job/{i}") for i in range(3)]
    opens = sorted((conn.read_open() for _ in futs), key=lambda f: f.stream)
    assert [f.stream for f in opens] == [1, 2, 3]
    assert {f.name for f in opens} == {"job/0", "job/1", "job/2"}
    name = proto.encode_name(opens[0].name)
    assert opens[0].body == proto.encode_acquire(name, 1000)  # version 1, the session's lease
    for frame, token in zip(reversed(opens), (30, 20, 10)):
        conn.grant(frame.stream, token)
    locks = {f.name: f for f in opens}
    held = [fut.result(5) for fut in futs]
    assert sorted(h.token for h in held) == [10, 20, 30]
    for h in held:
        assert h.lock.held and h.lock.name in locks
    session.close_later()
    conn.conn.wait_eof()
    conn.conn.close()


def test_release_returns_when_released_arrives(api: Api, start: Start) -> None:
    session, conn = start()
    fut = session.acquire("r")
    stream = conn.read_open().stream
    conn.grant(stream, 5)
    handle = fut.result(5)
    done = api.pool_call(handle.release)
    frame = conn.read()
    assert (frame.kind, frame.stream) == (mp.MSG_RELEASE, stream)
    assert handle.lock.released and not handle.lock.held  # released for the client at once
    time.sleep(0.2)
    assert not done.done(), "release returned before RELEASED"
    conn.grant(stream, 5)  # a frame of the stream after RELEASE: dropped
    conn.send(mp.encode_released(stream))
    done.result(5)
    assert not handle.lock.lost_error  # never reported lost
    assert session.session.alive and session.session.open_streams == 0


def test_try_acquire_on_waiting_releases_and_raises_busy(api: Api, start: Start) -> None:
    session, conn = start()
    fut = session.acquire("busy", try_only=True, limit=2)
    stream = conn.read_open().stream
    conn.waiting(stream)
    frame = conn.read()
    assert (frame.kind, frame.stream) == (mp.MSG_RELEASE, stream)
    with pytest.raises(errors.LockBusy) as info:
        fut.result(5)
    assert str(info.value) == 'monolock: all 2 permits of "busy" are taken'


def test_a_waiting_acquire_waits_for_the_promotion(api: Api, start: Start) -> None:
    session, conn = start()
    fut = session.acquire("w", shared=True)
    frame = conn.read_open()
    assert frame.body[:2] == bytes([proto.MSG_ACQUIRE, 2])  # shared: version 2
    conn.waiting(frame.stream)
    time.sleep(0.3)  # past a heartbeat: waiting is not failing
    assert not fut.done()
    conn.grant(frame.stream, 77)
    handle = fut.result(5)
    assert handle.token == 77 and handle.lock.shared


def test_a_timed_out_acquire_leaves_the_queue(api: Api, start: Start) -> None:
    session, conn = start()
    fut = session.acquire("t", timeout=0.2)
    stream = conn.read_open().stream
    conn.waiting(stream)
    with pytest.raises(errors.AcquireTimeout):
        fut.result(5)
    frame = conn.read()
    assert (frame.kind, frame.stream) == (mp.MSG_RELEASE, stream)


@pytest.mark.parametrize(
    ("code", "cls"), [(0x05, errors.TooManyStreams), (0x18, errors.NotAuthorized)]
)
def test_a_refused_open_raises_its_class_without_retrying(
    api: Api, start: Start, code: int, cls: type
) -> None:
    session, conn = start()
    fut = session.acquire("refused")
    stream = conn.read_open().stream
    conn.send(mp.encode_stream_end(stream, code, "no"))
    with pytest.raises(cls) as info:
        fut.result(5)
    assert isinstance(info.value, errors.ServerError) and info.value.from_server
    conn.pump(0.4)  # no second OPEN: heartbeats only
    assert session.session.alive


def test_stream_end_loses_one_claim_only(api: Api, start: Start) -> None:
    session, conn = start()
    a, b = session.acquire("a"), session.acquire("b")
    opens = {f.name: f.stream for f in (conn.read_open(), conn.read_open())}
    conn.grant(opens["a"], 1)
    conn.grant(opens["b"], 2)
    la, lb = a.result(5), b.result(5)
    conn.send(mp.encode_stream_end(opens["a"], 0x02, "closed by administrator"))
    assert la.wait_lost(5)
    loss = la.lock.lost_error
    assert loss is not None and isinstance(loss.cause, errors.AdminClosed) and loss.temporary
    conn.pump(1.5 * LEASE)  # past the first deadline: the session lives on
    assert lb.lock.held and session.session.alive and conn.heartbeats >= 3


def test_deadline_loses_every_claim_told_before_the_close(api: Api, start: Start) -> None:
    session, conn = start()
    futs = [session.acquire(f"d{i}") for i in range(2)]
    for _ in futs:
        frame = conn.read_open()
        conn.grant(frame.stream, frame.stream)
    held = [f.result(5) for f in futs]
    conn.alive = False  # no more ALIVE
    told: list[tuple[float, bool]] = []
    closed = threading.Event()

    def on_lost(error: errors.LockLost) -> None:
        told.append((time.monotonic(), closed.is_set()))

    for h in held:
        h.lock.add_lost_callback(on_lost)
    valid_until = held[0].lock.valid_until
    assert all(h.lock.valid_until == valid_until for h in held)  # one deadline
    for h in held:
        assert h.wait_lost(5 * LEASE)
        err = h.lock.lost_error
        assert err is not None and isinstance(err.cause, errors.HeartbeatTimeout)
    assert_on_time("the loss", told[0][0], valid_until, late=0.3 * LEASE)
    with pytest.raises(AssertionError):
        conn.read(timeout=0.05)  # reads only heartbeats until the close
    eof = conn.conn.wait_eof(3 * LEASE)
    closed.set()
    assert len(told) == 2 and all(t <= eof for t, _ in told)
    # Closed a lease after the last ack, not at the deadline (the margin).
    assert eof >= valid_until + 0.2 * LEASE - 0.01
    assert not session.session.alive
    with pytest.raises(errors.ConnectionClosed):
        session.acquire("after").result(5)


@pytest.mark.parametrize("end", ["eof", "error"])
def test_server_end_tells_every_loss_before_the_client_closes(
    api: Api, start: Start, end: str
) -> None:
    session, conn = start()
    fut = session.acquire("e")
    frame = conn.read_open()
    conn.grant(frame.stream, 9)
    handle = fut.result(5)
    if end == "eof":
        conn.conn.sock.shutdown(2 - 1)  # SHUT_WR: our FIN, the socket stays readable
    else:
        conn.send(b"\x13")  # the type byte alone ends the session
    assert handle.wait_lost(5)
    err = handle.lock.lost_error
    assert err is not None
    if end == "error":
        assert isinstance(err.cause, errors.ServerEnded) and err.code is None
    conn.conn.wait_eof(5)


def test_close_while_holding_releases_without_a_loss(api: Api, start: Start) -> None:
    session, conn = start()
    fut = session.acquire("c")
    frame = conn.read_open()
    conn.grant(frame.stream, 3)
    handle = fut.result(5)
    done = session.close_later()
    conn.conn.wait_eof(5)  # the client's FIN (the server releases everything at it)
    time.sleep(0.1)
    assert not done.done(), "close returned before the server's close"
    conn.conn.close()
    server_closed = time.monotonic()
    done.result(5)
    # Returned at the server's close, not at the bounded wait (0.8 s).
    assert time.monotonic() - server_closed < 0.4 * LEASE
    assert handle.lock.lost_error is None and not handle.lock.lost.is_set()


def test_proclaim_in_a_session(api: Api, start: Start) -> None:
    session, conn = start()
    fut = session.acquire("p", value="v1")
    frame = conn.read_open()
    assert frame.body[1] == 3  # a value: version 3
    conn.grant(frame.stream, 4)
    handle = fut.result(5)
    done = api.pool_call(lambda: handle.proclaim("v2"))
    on = conn.read()
    assert (on.kind, on.stream, on.body) == (mp.MSG_ON, frame.stream, proto.encode_proclaim(b"v2"))
    time.sleep(0.1)
    assert not done.done() and handle.lock.value == b"v1"
    conn.grant(frame.stream, 4)
    done.result(5)
    assert handle.lock.value == b"v2"


def test_an_old_server_says_sessions_are_unsupported(api: Api, fake_server: FakeServer) -> None:
    fut = open_session(api, fake_server.address, lease=LEASE)
    conn = fake_server.accept()
    conn.read_exact(6)
    conn.send(proto.encode_error(0x10, "unsupported protocol version"))
    with pytest.raises(errors.UnsupportedVersion, match="does not support sessions"):
        fut.result(5)


def test_no_session_ok_fails_within_the_client_timeout(api: Api, fake_server: FakeServer) -> None:
    began = time.monotonic()
    fut = open_session(api, fake_server.address, lease=LEASE)
    conn = fake_server.accept()
    conn.read_exact(6)
    with pytest.raises(errors.HeartbeatTimeout):
        fut.result(5)
    assert time.monotonic() - began < 0.8 * LEASE + 1.0


def test_cancelling_a_waiting_acquire_sends_release(api: Api, start: Start) -> None:
    session, conn = start()
    cancel = threading.Event()
    kwargs = {"cancel": cancel} if api.kind == "sync" else {}
    fut = session.acquire("x", **kwargs)
    stream = conn.read_open().stream
    conn.waiting(stream)
    time.sleep(0.05)
    if api.kind == "sync":
        cancel.set()
        with pytest.raises(errors.AcquireCancelled):
            fut.result(5)
    else:
        fut.cancel()  # cancels the task
    frame = conn.read()
    assert (frame.kind, frame.stream) == (mp.MSG_RELEASE, stream)


def test_bad_input_raises_before_sending(api: Api, start: Start) -> None:
    session, conn = start()
    cases: list[tuple[dict[str, Any], type[Exception]]] = [
        ({"limit": 0}, errors.InvalidMode),
        ({"value": b"v" * 1025}, errors.ValueTooLong),
        ({"timeout": -1}, errors.ConfigError),
    ]
    for kwargs, cls in cases:
        with pytest.raises(cls):
            session.acquire("ok", **kwargs).result(5)
    with pytest.raises(errors.EmptyName):
        session.acquire("").result(5)
    conn.pump(0.3)  # nothing was sent


# -- watches and the election in a session ------------------------------------------


def read_watch_open(conn: SessionConn) -> int:
    """Read an OPEN carrying a WATCH of a fresh watch; its stream."""
    head = conn.conn.read_exact(5)
    assert head[0] == mp.MSG_OPEN, head
    inner = conn.conn.read_exact(8)
    assert inner[:2] == bytes([wp.MSG_WATCH, 3]) and inner[2:6] == (1000).to_bytes(4, "big")
    name_len = int.from_bytes(inner[6:8], "big")
    conn.conn.read_exact(name_len + 16)
    return int.from_bytes(head[1:], "big")


def test_a_watch_in_a_session(api: Api, start: Start) -> None:
    session, conn = start()
    s = session.session
    fut: concurrent.futures.Future[monolock.SessionWatch | AsyncSessionWatch]
    if isinstance(s, AsyncSession):
        fut = api.run_later(s.watch("w"))
    else:
        sync_s = s
        fut = api.pool_call(lambda: sync_s.watch("w"))
    stream = read_watch_open(conn)
    time.sleep(0.05)
    assert not fut.done()  # not before its first WATCHING
    for frame in (
        wp.encode_event(wp.Event(5, 7, wp.EVENT_SNAPSHOT)),
        wp.encode_event(wp.Event(5, 7, wp.EVENT_SNAPSHOT_END)),
        wp.encode_watching(5, 7),
    ):
        conn.send(mp.encode_stream(stream, frame))
    watch = fut.result(5)
    assert watch.leader().state is monolock.LeaderState.NO_LEADER
    granted = wp.Event(5, 8, wp.EVENT_GRANTED, arrival=1, token=9, value=b"me:1")
    conn.send(mp.encode_stream(stream, wp.encode_event(granted)))
    deadline = time.monotonic() + 5
    while watch.leader().state is not monolock.LeaderState.LEADER:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert (watch.leader().token, watch.leader().value) == (9, b"me:1")
    conn.pump(1.5 * LEASE)  # the session's ALIVE keeps it known past its WATCHING's 0.8 s
    assert watch.state().known and watch.leader().token == 9
    conn.alive = False
    conn.pump(1.0 * LEASE, until_close=True)  # no more ALIVE: unknown at the deadline
    assert not watch.state().known
    assert watch.leader().state is monolock.LeaderState.UNKNOWN


def test_campaign_in_a_session_is_a_term(api: Api, start: Start) -> None:
    session, conn = start()
    s = session.session
    fut: concurrent.futures.Future[monolock.Term | monolock.AsyncTerm]
    if isinstance(s, AsyncSession):
        fut = api.run_later(s.campaign("lead", "10.0.0.7:80"))
    else:
        sync_s = s
        fut = api.pool_call(lambda: sync_s.campaign("lead", "10.0.0.7:80"))
    frame = conn.read_open()
    assert frame.body == proto.encode_acquire_v3("lead", 1000, 0, 0, b"10.0.0.7:80")
    conn.grant(frame.stream, 12)
    term = fut.result(5)
    assert isinstance(term, (monolock.Term, monolock.AsyncTerm)) and term.token == 12
    with pytest.raises(errors.ConfigError):
        if isinstance(s := session.session, AsyncSession):
            api.run(s.campaign("lead", ""))
        else:
            s.campaign("lead", "")


def test_closing_the_session_from_a_lost_callback(fake_server: FakeServer) -> None:
    """Sync: the callback runs while the close waits for the telling; a
    close from inside it must not wait for itself."""
    api = Api("sync")
    try:
        fut = open_session(api, fake_server.address, lease=LEASE)
        conn = SessionConn(fake_server.accept())
        conn.handshake()
        handle = fut.result(5)
        session = handle.session
        assert isinstance(session, monolock.Session)
        got = api.pool_call(lambda: session.acquire("cb"))
        frame = conn.read_open()
        conn.grant(frame.stream, 1)
        lock = got.result(5)
        closed = threading.Event()

        def on_lost(error: errors.LockLost) -> None:
            session.close()
            closed.set()

        lock.add_lost_callback(on_lost)
        conn.conn.sock.shutdown(1)  # SHUT_WR: the server's end
        assert closed.wait(5), "close() in a lost callback hung"
        assert lock.lost.is_set()
    finally:
        api.close()
