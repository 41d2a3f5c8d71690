"""Both APIs against a scripted server: exact bytes, timing and every kind
of failure. Each test runs once with the sync and once with the asyncio
client (the ``api`` fixture)."""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from concurrent.futures import Future
from typing import Any

import pytest

from monolock import _protocol as proto
from monolock import errors
from monolock._connection import Connection
from monolock._lock import RELEASE_WAIT_MAX
from monolock.aio import _AioConnection

from .support import (
    Api,
    FakeConn,
    FakeServer,
    LockHandle,
    assert_on_time,
    load_spec,
    release_with,
    unused_address,
)

WAITING = b"\x11"


def acquired(token: int) -> bytes:
    return proto.encode_acquired(token)


def grant(
    fake_server: FakeServer, fut: Future[LockHandle], token: int
) -> tuple[LockHandle, FakeConn]:
    """Accept the client's next connection, read its ACQUIRE, grant the
    lock with ``token`` and return the lock and the connection."""
    conn = fake_server.accept()
    conn.read_acquire()
    conn.send(acquired(token))
    return fut.result(5), conn


def test_acquire_sends_the_exact_frame(api: Api, fake_server: FakeServer) -> None:
    fut = api.acquire(fake_server.address, "ロック/äö/🔒", lease=5)
    conn = fake_server.accept()
    expected = bytes.fromhex("0101000013880013e383ade38383e382af2fc3a4c3b62ff09f9492")
    assert conn.read_exact(len(expected)) == expected
    conn.send(acquired(42))
    handle = fut.result(5)
    assert handle.token == 42
    assert handle.lock.name == "ロック/äö/🔒"
    release_with(handle, conn)


def test_bytes_name(api: Api, fake_server: FakeServer) -> None:
    fut = api.acquire(fake_server.address, b"raw", lease=1)
    conn = fake_server.accept()
    assert conn.read_acquire() == (1000, b"raw")
    conn.send(acquired(2**64 - 1))
    handle = fut.result(5)
    assert handle.token == 2**64 - 1
    release_with(handle, conn)


def test_frames_split_byte_by_byte(api: Api, fake_server: FakeServer) -> None:
    fut = api.acquire(fake_server.address, "a", lease=10)
    conn = fake_server.accept()
    conn.read_acquire()
    for b in WAITING + acquired(9007199254740993):
        conn.send(bytes([b]))
        time.sleep(0.005)
    handle = fut.result(5)
    assert handle.token == 9007199254740993
    release_with(handle, conn)


def test_heartbeat_interval_and_validity(api: Api, fake_server: FakeServer) -> None:
    lease = 1.0  # base interval 250 ms, client timeout 800 ms
    fut = api.acquire(fake_server.address, "hb", lease=lease)
    handle, conn = grant(fake_server, fut, 1)
    arrivals = []
    for _ in range(5):
        arrivals.append(conn.read_heartbeat(timeout=2 * lease))
        conn.send(acquired(1))
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    mean = sum(gaps) / len(gaps)
    # Send to send every lease/4 (less 2*srtt); wide for a busy machine.
    interval = lease / 4
    assert 0.5 * interval <= mean <= 2 * interval, (
        f"mean heartbeat gap {mean * 1000:.0f} ms, want {interval * 500:.0f}.."
        f"{interval * 2000:.0f} ms (gaps {[round(g * 1000) for g in gaps]} ms)"
    )
    # Validity: the last acked send + 0.8 x lease at most.
    remaining = handle.lock.valid_until - time.monotonic()
    assert remaining <= 0.8 * lease, f"valid for {remaining:.3f} s, more than 0.8 x lease"
    assert handle.lock.held, handle.lock.lost_error
    release_with(handle, conn)


def test_one_heartbeat_in_flight_then_lost_on_silence(api: Api, fake_server: FakeServer) -> None:
    """No ack for a heartbeat: no other heartbeat, the loss is told at the
    acknowledged send + 0.8 x lease, and the connection stays open, silent,
    until that send + lease."""
    lease = 2.0  # heartbeat after 0.5 s, loss 1.6 s after its send, close 2 s after
    lost_at: list[float] = []
    lost: list[errors.LockLost] = []

    def on_lost(err: errors.LockLost) -> None:
        lost_at.append(time.monotonic())
        lost.append(err)

    fut = api.acquire(fake_server.address, "silent", lease=lease, on_lost=on_lost)
    handle, conn = grant(fake_server, fut, 3)
    conn.read_heartbeat(timeout=2 * lease)
    conn.send(acquired(3))  # ack the first heartbeat: validity = its send + 0.8 x lease
    conn.read_heartbeat(timeout=2 * lease)  # never acked
    closed = conn.wait_eof(timeout=3 * lease, heartbeats=False)
    assert handle.wait_lost(lease)
    deadline = handle.lock.valid_until  # it stays put after the loss
    assert_on_time("the loss, told at valid_until", lost_at[0], deadline, late=0.15 * lease)
    assert_on_time(
        "the close, at valid_until + 0.2 x lease", closed, deadline + 0.2 * lease, late=0.25 * lease
    )
    assert lost_at[0] <= closed, "the close came before the loss was told"
    err = handle.lock.lost_error
    assert isinstance(err, errors.LockLost)
    assert isinstance(err.cause, errors.HeartbeatTimeout)
    assert err.code is None and err.token == 3
    assert not handle.lock.held and handle.lock.is_lost
    with pytest.raises(errors.LockLost):
        handle.lock.check()
    assert [e.token for e in lost] == [3] and lost[0] is err
    # Lost is final: no new connection, no silent re-acquire.
    fake_server.assert_no_connection(0.5)
    handle.release()  # fine after a loss


def test_late_ack_after_the_loss_changes_nothing(api: Api, fake_server: FakeServer) -> None:
    """The ack comes after the deadline: the lock stays lost, no heartbeat
    follows, and the client's FIN comes at the ACQUIRE's send + lease."""
    lease = 2.0  # heartbeat at 0.5 s, loss at 1.6 s, close at 2 s
    lost_at: list[float] = []
    fut = api.acquire(
        fake_server.address, "late", lease=lease, on_lost=lambda e: lost_at.append(time.monotonic())
    )
    conn = fake_server.accept()
    conn.read_acquire()
    conn.send(acquired(5))
    handle = fut.result(5)
    deadline = handle.lock.valid_until  # the ACQUIRE's send + 0.8 x lease
    conn.read_heartbeat(timeout=2 * lease)
    assert handle.wait_lost(2 * lease)
    conn.send(acquired(5))  # the heartbeat's ack, too late
    closed = conn.wait_eof(timeout=2 * lease, heartbeats=False)
    assert handle.lock.valid_until == deadline, "the late ack moved the deadline"
    assert_on_time("the loss, told at valid_until", lost_at[0], deadline, late=0.15 * lease)
    assert_on_time(
        "the close, at valid_until + 0.2 x lease", closed, deadline + 0.2 * lease, late=0.25 * lease
    )
    assert lost_at[0] <= closed, "the close came before the loss was told"
    assert handle.lock.is_lost and not handle.lock.held
    handle.release()


def test_release_after_the_loss_closes_at_once(api: Api, fake_server: FakeServer) -> None:
    lease = 2.0
    fut = api.acquire(fake_server.address, "let-go", lease=lease)
    handle, conn = grant(fake_server, fut, 6)
    conn.read_heartbeat(timeout=2 * lease)  # never acked
    assert handle.wait_lost(2 * lease)
    start = time.monotonic()
    released = api.pool_call(handle.release)
    closed = conn.wait_eof(timeout=2 * lease, heartbeats=False)
    # At once: not after the server's close (up to 1 s), not at the lease (0.4 s).
    assert_on_time("the close after release()", closed, start, late=0.15 * lease)
    released.result(5)
    assert handle.lock.released and handle.lock.is_lost


def test_late_ack_releases_the_next_heartbeat_at_once(api: Api, fake_server: FakeServer) -> None:
    lease = 3.0  # interval 0.75 s, client timeout 2.4 s
    fut = api.acquire(fake_server.address, "late", lease=lease)
    handle, conn = grant(fake_server, fut, 1)
    conn.read_heartbeat(timeout=2 * lease)
    time.sleep(0.4 * lease)  # well past the interval, well before the deadline
    conn.send(acquired(1))
    acked = time.monotonic()
    nxt = conn.read_heartbeat(timeout=2 * lease)
    # At once, not a whole interval after the ack.
    assert_on_time("the heartbeat after a late ack", nxt, acked, late=lease / 8)
    release_with(handle, conn)


def test_promotion_during_in_flight_heartbeat(api: Api, fake_server: FakeServer) -> None:
    """A promotion is no ack: without the heartbeat's own ack the lock is
    lost 0.8 x lease after the last acknowledged send (here the ACQUIRE),
    and the connection closes at that send + lease."""
    lease = 2.0
    fut = api.acquire(fake_server.address, "promo", lease=lease)
    conn = fake_server.accept()
    conn.read_acquire()
    acquire_seen = time.monotonic()
    conn.send(WAITING)
    conn.read_heartbeat(timeout=2 * lease)
    conn.send(acquired(11))  # promotion while the heartbeat is in flight
    handle = fut.result(5)
    assert handle.token == 11
    deadline = handle.lock.valid_until
    assert deadline <= acquire_seen + 0.8 * lease, "the promotion counted as an ack"
    closed = conn.wait_eof(timeout=3 * lease, heartbeats=False)
    assert_on_time(
        "the close, at valid_until + 0.2 x lease", closed, deadline + 0.2 * lease, late=0.25 * lease
    )
    assert handle.wait_lost(lease)
    lost = handle.lock.lost_error
    assert lost is not None and isinstance(lost.cause, errors.HeartbeatTimeout)


def test_promotion_then_ack_keeps_the_lock(api: Api, fake_server: FakeServer) -> None:
    fut = api.acquire(fake_server.address, "promo2", lease=1.0)
    conn = fake_server.accept()
    conn.read_acquire()
    conn.send(WAITING)
    hb = conn.read_heartbeat()
    conn.send(acquired(12) + acquired(12))  # promotion, then the ack
    handle = fut.result(5)
    for _ in range(5):
        conn.read_heartbeat()
        conn.send(acquired(12))
    assert not handle.lock.lost.is_set()
    assert handle.lock.valid_until > hb + 0.8
    release_with(handle, conn)


def test_waiting_hook_and_heartbeats_while_waiting(api: Api, fake_server: FakeServer) -> None:
    waited = threading.Event()
    fut = api.acquire(fake_server.address, "queue", lease=1, on_waiting=lambda name: waited.set())
    conn = fake_server.accept()
    conn.read_acquire()
    conn.send(WAITING)
    assert waited.wait(5)
    for _ in range(5):  # 5 x 250 ms: longer than the lease
        conn.read_heartbeat()
        conn.send(WAITING)
    assert not fut.done()
    conn.send(acquired(4))
    handle = fut.result(5)
    assert handle.token == 4
    release_with(handle, conn)


@pytest.mark.parametrize("code", [0x01, 0x02, 0x09])
def test_temporary_error_while_waiting_requeues(
    api: Api, fake_server: FakeServer, code: int
) -> None:
    waits: list[str] = []
    fut = api.acquire(fake_server.address, "requeue", lease=1, on_waiting=waits.append)
    first = fake_server.accept()
    first.read_acquire()
    first.send(WAITING)
    first.send(proto.encode_error(code, ""))
    first.close()
    second = fake_server.accept()  # a new connection, after a short backoff
    assert second.read_acquire() == (1000, b"requeue")
    second.send(WAITING)
    second.send(acquired(8))
    handle = fut.result(5)
    assert handle.token == 8
    assert waits == ["requeue", "requeue"]
    release_with(handle, second)


def test_broken_connection_while_waiting_requeues(api: Api, fake_server: FakeServer) -> None:
    fut = api.acquire(fake_server.address, "broken", lease=1)
    first = fake_server.accept()
    first.read_acquire()
    first.send(WAITING)
    first.close()
    handle, second = grant(fake_server, fut, 2)
    release_with(handle, second)


def test_silent_server_while_waiting_requeues(api: Api, fake_server: FakeServer) -> None:
    fut = api.acquire(fake_server.address, "mute", lease=0.2)
    first = fake_server.accept()
    first.read_acquire()
    # No reply at all: after 160 ms the client gives up on this connection.
    first.wait_eof(timeout=3)
    handle, second = grant(fake_server, fut, 5)
    release_with(handle, second)


@pytest.mark.parametrize(
    ("code", "cls"),
    [(0x15, errors.NameTooLong), (0x18, errors.NotAuthorized), (0x7E, errors.ServerError)],
)
def test_terminal_error_while_waiting_is_raised(
    api: Api, fake_server: FakeServer, code: int, cls: type[errors.ServerError]
) -> None:
    fut = api.acquire(fake_server.address, "term", lease=1)
    conn = fake_server.accept()
    conn.read_acquire()
    conn.send(WAITING + proto.encode_error(code, "detail"))
    with pytest.raises(cls) as info:
        fut.result(5)
    assert type(info.value) is cls
    assert info.value.code == code and info.value.from_server and not info.value.temporary
    assert info.value.reason == "detail"
    fake_server.assert_no_connection(0.3)


@pytest.mark.parametrize(
    ("code", "cls"),
    [(0x01, errors.ShuttingDown), (0x02, errors.AdminClosed), (0x7E, errors.ServerError)],
)
def test_error_while_held_is_a_loss(
    api: Api, fake_server: FakeServer, code: int, cls: type[errors.ServerError]
) -> None:
    fut = api.acquire(fake_server.address, "held", lease=1)
    handle, conn = grant(fake_server, fut, 6)
    conn.send(proto.encode_error(code, "bye"))
    assert handle.wait_lost(5)
    lost = handle.lock.lost_error
    assert lost is not None and type(lost.cause) is cls
    assert lost.code == code and lost.temporary is (code < 0x10)
    conn.wait_eof()
    fake_server.assert_no_connection(0.5)  # never re-acquired silently


def test_connection_reset_while_held_is_a_loss(api: Api, fake_server: FakeServer) -> None:
    fut = api.acquire(fake_server.address, "eof", lease=1)
    handle, conn = grant(fake_server, fut, 6)
    conn.close()
    assert handle.wait_lost(5)
    lost = handle.lock.lost_error
    assert lost is not None and isinstance(lost.cause, errors.ConnectionClosed)


def test_protocol_violation_while_held_is_a_loss(api: Api, fake_server: FakeServer) -> None:
    fut = api.acquire(fake_server.address, "junk", lease=1)
    handle, conn = grant(fake_server, fut, 6)
    conn.send(b"\x7f")
    assert handle.wait_lost(5)
    lost = handle.lock.lost_error
    assert lost is not None and isinstance(lost.cause, errors.ProtocolViolation)
    conn.wait_eof()


@pytest.mark.parametrize(
    ("reply", "cls"),
    [(WAITING, errors.LockBusy), (proto.encode_error(0x01, ""), errors.ShuttingDown)],
    ids=["busy", "temporary-error"],
)
def test_try_acquire_refused_is_raised_and_closes(
    api: Api, fake_server: FakeServer, reply: bytes, cls: type[errors.MonolockError]
) -> None:
    """A try-acquisition never retries: a busy lock or a temporary error
    ends it and its connection."""
    fut = api.acquire(fake_server.address, "busy", lease=1, try_only=True)
    conn = fake_server.accept()
    conn.read_acquire()
    conn.send(reply)
    with pytest.raises(cls):
        fut.result(5)
    conn.wait_eof()
    fake_server.assert_no_connection(0.3)


def test_try_acquire_free(api: Api, fake_server: FakeServer) -> None:
    fut = api.acquire(fake_server.address, "free", lease=1, try_only=True)
    handle, conn = grant(fake_server, fut, 1)
    release_with(handle, conn)


def test_timeout_while_waiting_closes(api: Api, fake_server: FakeServer) -> None:
    start = time.monotonic()
    fut = api.acquire(fake_server.address, "slow", lease=1, timeout=0.3)
    conn = fake_server.accept()
    conn.read_acquire()
    conn.send(WAITING)
    with pytest.raises(errors.AcquireTimeout):
        fut.result(5)
    assert time.monotonic() - start >= 0.29
    conn.wait_eof()


@pytest.mark.parametrize(
    ("name", "lease", "cls"),
    [
        ("", 1.0, errors.EmptyName),
        ("x" * 256, 1.0, errors.NameTooLong),
        (b"\xff", 1.0, errors.NameNotUTF8),
        ("a", 0, errors.InvalidLease),
        ("", 4294967.296, errors.InvalidLease),
    ],
)
def test_validation_sends_nothing(
    api: Api, fake_server: FakeServer, name: str | bytes, lease: float, cls: type[Exception]
) -> None:
    fut = api.acquire(fake_server.address, name, lease=lease)
    with pytest.raises(cls) as info:
        fut.result(5)
    assert isinstance(info.value, errors.ServerError) and not info.value.from_server
    fake_server.assert_no_connection(0.2)


def test_try_acquire_unreachable(api: Api) -> None:
    fut = api.acquire(unused_address(), "nobody", lease=1, try_only=True)
    with pytest.raises(errors.ConnectError):
        fut.result(10)


def test_unreachable_with_timeout(api: Api) -> None:
    fut = api.acquire(unused_address(), "nobody", lease=1, timeout=0.4)
    with pytest.raises(errors.AcquireTimeout) as info:
        fut.result(10)
    assert isinstance(info.value.__cause__, errors.ConnectError)


def test_second_server_when_first_is_down(api: Api, fake_server: FakeServer) -> None:
    fut = api.acquire([unused_address(), fake_server.address], "failover", lease=1)
    handle, conn = grant(fake_server, fut, 1)
    release_with(handle, conn)


def test_connect_timeout(api: Api) -> None:
    # A listener whose backlog is full never completes the handshake: the
    # connect timeout has to end the attempt.
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        fillers = []
        try:
            for _ in range(8):
                s = socket.socket()
                s.setblocking(False)
                s.connect_ex(("127.0.0.1", port))
                fillers.append(s)
            fut = api.acquire(
                f"127.0.0.1:{port}", "stuck", lease=1, try_only=True, connect_timeout=0.3
            )
            with pytest.raises(errors.ConnectError):
                fut.result(10)
        finally:
            for s in fillers:
                s.close()


def test_largest_lease(api: Api, fake_server: FakeServer) -> None:
    fut = api.acquire(fake_server.address, "x", lease=4294967.295)
    conn = fake_server.accept()
    assert conn.read_exact(9) == bytes.fromhex("0101ffffffff000178")
    conn.send(acquired(1))
    handle = fut.result(5)
    conn.assert_silent(0.3)  # first heartbeat in 12 days
    assert handle.lock.remaining > 3_000_000
    fut2 = api.pool_call(handle.release)
    conn.wait_eof()
    conn.close()
    fut2.result(5)


def test_release_waits_for_the_server_close(api: Api, fake_server: FakeServer) -> None:
    fut = api.acquire(fake_server.address, "bye", lease=10)
    handle, conn = grant(fake_server, fut, 1)
    released = api.pool_call(handle.release)
    conn.wait_eof()  # the client's half-close
    assert not released.done()  # still waiting for the server's side
    conn.close()
    released.result(5)
    assert handle.lock.released and not handle.lock.lost.is_set()


def test_release_gives_up_waiting_for_a_mute_server(api: Api, fake_server: FakeServer) -> None:
    lease = 2.0
    fut = api.acquire(fake_server.address, "mute-bye", lease=lease)
    handle, _ = grant(fake_server, fut, 1)
    start = time.monotonic()
    handle.release()  # the server never closes: bounded by min(0.8 x lease, 1 s)
    wait = min(0.8 * lease, RELEASE_WAIT_MAX)
    assert_on_time("release() giving up", time.monotonic(), start + wait, late=0.5 * lease)
    assert not handle.lock.lost.is_set()


def test_loss_reported_on_time_while_the_caller_spins(fake_server: FakeServer) -> None:
    """The caller's thread is busy in pure Python and never polls; the
    keeper thread still tells the loss at valid_until, then keeps the
    connection open until valid_until + 0.2 x lease."""
    import monolock

    lease = 3.0
    seen: dict[str, float] = {}
    failures: list[BaseException] = []

    def server() -> None:
        # Ack the first heartbeat only (if one comes before the loss), then
        # read until the client closes. Nothing here asserts: the test
        # thread does, with the instants recorded.
        try:
            conn = fake_server.accept(timeout=lease)
            conn.read_acquire()
            conn.send(acquired(1))
            conn.sock.settimeout(3 * lease)
            acked = False
            while conn.sock.recv(64):
                if not acked:
                    conn.send(acquired(1))
                    acked = True
        except ConnectionResetError:
            pass
        except BaseException as exc:
            failures.append(exc)
            return
        seen["closed"] = time.monotonic()

    script = threading.Thread(target=server)
    script.start()
    lock = monolock.Client(fake_server.address, lease=lease).acquire(
        "spin", on_lost=lambda err: seen.setdefault("lost", time.monotonic())
    )
    granted = time.monotonic()
    limit = granted + 3 * lease
    while not lock.lost.is_set() and time.monotonic() < limit:
        pass  # the push signal only: reading an Event decides nothing
    script.join(3 * lease)
    assert not failures, f"the scripted server failed: {failures[0]!r}"
    deadline = lock.valid_until  # it stays put after the loss
    assert "lost" in seen, (
        f"the loss was not told within {3 * lease:.0f} s of the grant; "
        f"valid_until was {deadline - granted:.3f} s after the grant"
    )
    assert "closed" in seen, "the client did not close the connection"
    assert_on_time("the loss, told at valid_until", seen["lost"], deadline, late=0.15 * lease)
    assert_on_time(
        "the close, at valid_until + 0.2 x lease",
        seen["closed"],
        deadline + 0.2 * lease,
        late=0.25 * lease,
    )
    assert seen["lost"] <= seen["closed"], "the close came before the loss was told"


def connection_open(handle: LockHandle) -> bool:
    """Whether the client has not closed its end of the lock's connection."""
    conn = handle.lock._conn
    if isinstance(conn, _AioConnection):
        return conn._transport is not None and not conn._transport.is_closing()
    assert isinstance(conn, Connection)
    return bool(conn._sock.fileno() != -1)


@pytest.mark.parametrize("end", ["eof", "error"])
def test_server_end_is_told_before_the_client_closes(
    api: Api, fake_server: FakeServer, end: str
) -> None:
    fut = api.acquire(fake_server.address, "told-first", lease=2)
    handle, conn = grant(fake_server, fut, 9)
    open_when_told: list[bool] = []
    handle.lock.add_lost_callback(lambda err: open_when_told.append(connection_open(handle)))
    if end == "error":
        conn.send(proto.encode_error(0x02, "kicked"))
    conn.close()
    assert handle.wait_lost(5)
    assert open_when_told == [True]
    deadline = time.monotonic() + 5
    while connection_open(handle):  # closed right after, without waiting
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_release_from_the_lost_callback_closes_at_once(fake_server: FakeServer) -> None:
    """A sync on_lost callback runs on a thread of the client's; releasing
    there must not wait for that thread, and closes at once."""
    import monolock

    client = monolock.Client(fake_server.address, lease=2.0)
    holder: list[monolock.Lock] = []
    told: list[float] = []

    def on_lost(err: errors.LockLost) -> None:
        told.append(time.monotonic())
        holder[0].release()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        fut = pool.submit(client.acquire, "cb", on_lost=on_lost)
        conn = fake_server.accept()
        conn.read_acquire()
        conn.send(acquired(4))
        holder.append(fut.result(5))
    conn.read_heartbeat(timeout=4)  # never acked: lost at 1.6 s, closed at once
    closed = conn.wait_eof(timeout=5, heartbeats=False)
    assert told, "the loss was not told"
    # At once, not at the lease (0.4 s after the loss).
    assert_on_time("the close after a release in the callback", closed, told[0], late=0.3)
    assert holder[0].released and holder[0].is_lost


def test_a_server_that_does_not_speak_monolock_is_dropped(
    api: Api, fake_server: FakeServer
) -> None:
    """An HTTP answer (the admin port, say): the acquisition does not ask
    that server again, and with no other server the error comes at once."""
    fut = api.acquire(fake_server.address, "wrong-port", lease=1)
    conn = fake_server.accept()
    conn.read_acquire()
    conn.send(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    with pytest.raises(errors.NotMonolock, match="is this the admin port"):
        fut.result(5)
    fake_server.assert_no_connection(0.3)


def test_the_walk_goes_on_without_the_wrong_port(api: Api, fake_server: FakeServer) -> None:
    other = FakeServer()
    try:
        fut = api.acquire([other.address, fake_server.address], "two-ports", lease=1)
        wrong = other.accept()
        wrong.read_acquire()
        wrong.send(b"\x15\x03\x03\x00\x02\x02\x46")  # a TLS alert
        conn = fake_server.accept()  # at once, no sleep
        conn.read_acquire()
        conn.send(WAITING + proto.encode_error(0x01, "restarting"))
        handle, second = grant(fake_server, fut, 3)  # not back to the wrong port
        other.assert_no_connection(0.1)
        release_with(handle, second)
    finally:
        other.close()


def test_progress_logs_at_debug_and_a_loss_at_info(
    api: Api, fake_server: FakeServer, caplog: pytest.LogCaptureFixture
) -> None:
    address = fake_server.address
    with caplog.at_level(logging.DEBUG, logger="monolock"):
        fut = api.acquire(address, "logged", lease=10)
        conn = fake_server.accept()
        conn.read_acquire()
        conn.send(WAITING + acquired(5))
        handle = fut.result(5)
        conn.send(proto.encode_error(0x02, "kicked"))
        assert handle.wait_lost(5)
        conn.wait_eof()
        handle.release()
    records = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "monolock"]
    assert records == [
        ("DEBUG", f"acquire 'logged': connecting to {address}"),
        ("DEBUG", f"acquire 'logged': queued by {address}"),
        ("DEBUG", f"acquire 'logged': granted by {address}, token 5"),
        ("INFO", "lock 'logged' (token 5) lost: kicked (0x02)"),
    ]


def test_try_acquire_moves_past_a_passive_server(api: Api, fake_server: FakeServer) -> None:
    passive = FakeServer()
    try:
        fut = api.acquire([passive.address, fake_server.address], "ha", lease=1, try_only=True)
        first = passive.accept()
        first.read_acquire()
        first.send(proto.encode_error(0x03, fake_server.address))
        handle, conn = grant(fake_server, fut, 4)  # at once, no sleep
        passive.assert_no_connection(0.1)
        release_with(handle, conn)
    finally:
        passive.close()


def test_a_passive_server_sends_the_claim_to_the_leader(api: Api, fake_server: FakeServer) -> None:
    """ERROR 0x03 names the active server: after a short pause (delay_0,
    25-50 ms) the next attempt goes there, past the server between."""
    passive, between = FakeServer(), FakeServer()
    try:
        servers = [passive.address, between.address, fake_server.address]
        fut = api.acquire(servers, "ha", lease=1)
        first = passive.accept()
        first.read_acquire()
        refused = time.monotonic()
        first.send(proto.encode_error(0x03, fake_server.address))
        conn = fake_server.accept()
        # delay_0: at least 25 ms, never the backoff's later steps.
        assert_on_time("the attempt at the leader", time.monotonic(), refused + 0.025, late=0.3)
        conn.read_acquire()
        conn.send(acquired(8))
        handle = fut.result(5)
        between.assert_no_connection(0.1)
        release_with(handle, conn)
    finally:
        passive.close()
        between.close()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, 'monolock: lock "b" is held by another session'),
        ({"limit": 2}, 'monolock: all 2 permits of "b" are taken'),
        ({"shared": True}, 'monolock: lock "b" is held exclusively by another session'),
    ],
    ids=["exclusive", "semaphore", "shared"],
)
def test_busy_says_what_kept_the_claim_out(
    api: Api, fake_server: FakeServer, kwargs: dict[str, Any], message: str
) -> None:
    """The message of a try-acquire's LockBusy follows the claim's mode
    (spec/vectors/messages.json, busy)."""
    fut = api.acquire(fake_server.address, "b", lease=1, try_only=True, **kwargs)
    conn = fake_server.accept()
    shared = bool(kwargs)
    conn.read_exact(len(proto.encode_claim(b"b", 1000, shared, kwargs.get("limit", 0))))
    conn.send(WAITING)
    with pytest.raises(errors.LockBusy) as info:
        fut.result(5)
    assert str(info.value) == message
    conn.wait_eof()


# -- shared claims and semaphores (protocol version 2) ----------------------------


@pytest.mark.parametrize(
    ("kwargs", "expected", "shared", "limit"),
    [
        ({"shared": True}, "0102000013880100000004726f6f6d", True, None),
        ({"limit": 4}, "0102000013880100040004726f6f6d", True, 4),
        ({"shared": True, "limit": 65535}, "01020000138801ffff0004726f6f6d", True, 65535),
        ({}, "0101000013880004726f6f6d", False, None),
        ({"shared": False}, "0101000013880004726f6f6d", False, None),
    ],
    ids=["shared", "semaphore", "shared-and-limit", "exclusive", "shared-false"],
)
def test_claim_sends_the_exact_frame_of_its_mode(
    api: Api,
    fake_server: FakeServer,
    kwargs: dict[str, Any],
    expected: str,
    shared: bool,
    limit: int | None,
) -> None:
    """Exclusive claims keep the version 1 bytes; shared ones send version 2."""
    fut = api.acquire(fake_server.address, "room", lease=5, **kwargs)
    conn = fake_server.accept()
    want = bytes.fromhex(expected)
    assert conn.read_exact(len(want)) == want
    conn.send(WAITING + acquired(11))
    handle = fut.result(5)
    assert handle.token == 11
    assert handle.lock.shared is shared
    assert handle.lock.limit == limit
    # Heartbeats are as in version 1.
    conn.read_heartbeat(timeout=5)
    conn.send(acquired(11))
    release_with(handle, conn)


@pytest.mark.parametrize("try_only", [False, True], ids=["acquire", "try"])
def test_unsupported_version_to_a_shared_claim_is_terminal(
    api: Api, fake_server: FakeServer, try_only: bool
) -> None:
    """A version 1 server answers the v2 ACQUIRE with 0x10: SharedUnsupported
    at once, never retried (no second connection), even with a timeout."""
    kwargs: dict[str, Any] = {} if try_only else {"timeout": 10}
    fut = api.acquire(fake_server.address, "r", lease=1, shared=True, try_only=try_only, **kwargs)
    conn = fake_server.accept()
    assert conn.read_exact(2) == b"\x01\x02"
    conn.send(proto.encode_error(0x10, "unsupported protocol version"))
    start = time.monotonic()
    with pytest.raises(errors.SharedUnsupported) as info:
        fut.result(5)
    assert time.monotonic() - start < 2
    error = info.value
    assert isinstance(error, errors.UnsupportedVersion)
    assert error.code == 0x10 and error.from_server and not error.temporary
    assert f"server {fake_server.address} does not support shared locks" in str(error)
    conn.wait_eof()
    fake_server.assert_no_connection(0.5)


def test_limit_mismatch_is_terminal(api: Api, fake_server: FakeServer) -> None:
    fut = api.acquire(fake_server.address, "pool", lease=1, limit=2, timeout=10)
    conn = fake_server.accept()
    conn.read_exact(2)
    conn.send(proto.encode_error(0x1A, "limit differs from the lock's: it is 3"))
    with pytest.raises(errors.LimitMismatch) as info:
        fut.result(5)
    assert info.value.code == 0x1A and info.value.from_server and not info.value.temporary
    fake_server.assert_no_connection(0.3)


@pytest.mark.parametrize(
    ("name", "kwargs", "cls"),
    [
        ("a", {"limit": 0}, errors.InvalidMode),
        ("a", {"limit": -1}, errors.InvalidMode),
        ("a", {"limit": 65536}, errors.InvalidMode),
        ("", {"limit": 0}, errors.InvalidMode),  # the mode is checked before the name
        ("", {"shared": True}, errors.EmptyName),
        (b"\xff", {"limit": 2}, errors.NameNotUTF8),
    ],
)
def test_shared_validation_sends_nothing(
    api: Api,
    fake_server: FakeServer,
    name: str | bytes,
    kwargs: dict[str, Any],
    cls: type[errors.ServerError],
) -> None:
    fut = api.acquire(fake_server.address, name, lease=1, **kwargs)
    with pytest.raises(cls) as info:
        fut.result(5)
    assert type(info.value) is cls and not info.value.from_server
    if cls is errors.InvalidMode:
        assert str(info.value) == (
            "monolock: a semaphore's limit must be a whole number from 1 to 65535 permits, "
            f"got {kwargs['limit']} (0x19)"
        )
    fake_server.assert_no_connection(0.2)


# -- a value per claim (protocol version 3) ---------------------------------------

V3_ACQUIRES = [
    v
    for v in load_spec("vectors/frames.json")["client_valid_v3"]
    if v["type"] == "ACQUIRE" and "value" in v  # text values: sent as str and as bytes
]


@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "bytes"])
@pytest.mark.parametrize("vec", V3_ACQUIRES, ids=lambda v: v["desc"])
def test_claim_with_a_value_sends_version_3(
    api: Api, fake_server: FakeServer, vec: dict[str, Any], as_bytes: bool
) -> None:
    """A claim with a value sends the exact version 3 bytes of
    spec/vectors/frames.json; heartbeats stay as they are."""
    value: str | bytes = vec["value"].encode("utf-8") if as_bytes else vec["value"]
    kwargs: dict[str, Any] = {"limit": vec["limit"]} if vec["mode"] == proto.MODE_SHARED else {}
    fut = api.acquire(
        fake_server.address, vec["name"], lease=vec["lease_ms"] / 1000, value=value, **kwargs
    )
    conn = fake_server.accept()
    want = bytes.fromhex(vec["hex"])
    assert conn.read_exact(len(want)) == want
    conn.send(acquired(21))
    handle = fut.result(5)
    assert handle.token == 21
    assert handle.lock.value == vec["value"].encode("utf-8")
    release_with(handle, conn)


@pytest.mark.parametrize("kwargs", [{}, {"shared": True}, {"limit": 2}])
def test_an_empty_value_is_no_value(
    api: Api, fake_server: FakeServer, kwargs: dict[str, Any]
) -> None:
    """value="" (or b"") keeps the version 1 or 2 bytes of the same claim."""
    fut = api.acquire(fake_server.address, "room", lease=5, value=b"", **kwargs)
    conn = fake_server.accept()
    want = proto.encode_claim(b"room", 5000, bool(kwargs), kwargs.get("limit", 0))
    assert conn.read_exact(len(want)) == want
    conn.send(acquired(3))
    handle = fut.result(5)
    assert handle.lock.value is None
    release_with(handle, conn)


@pytest.mark.parametrize("kwargs", [{}, {"shared": True}], ids=["exclusive", "shared"])
@pytest.mark.parametrize("try_only", [False, True], ids=["acquire", "try"])
def test_unsupported_version_to_a_claim_with_a_value_is_terminal(
    api: Api, fake_server: FakeServer, try_only: bool, kwargs: dict[str, Any]
) -> None:
    """A server older than version 3 answers the v3 ACQUIRE with 0x10:
    ValueUnsupported at once (also for a shared claim), never retried."""
    if not try_only:
        kwargs = {**kwargs, "timeout": 10}
    fut = api.acquire(
        fake_server.address, "r", lease=1, value="10.0.0.7:8080", try_only=try_only, **kwargs
    )
    conn = fake_server.accept()
    assert conn.read_exact(2) == b"\x01\x03"
    conn.send(proto.encode_error(0x10, "unsupported protocol version"))
    start = time.monotonic()
    with pytest.raises(errors.ValueUnsupported) as info:
        fut.result(5)
    assert time.monotonic() - start < 2
    error = info.value
    assert isinstance(error, errors.UnsupportedVersion)
    assert not isinstance(error, errors.SharedUnsupported)
    assert error.code == 0x10 and error.from_server and not error.temporary
    assert error.address == fake_server.address
    assert error.reason == "unsupported protocol version"
    assert str(error) == (
        f"monolock: server {fake_server.address} does not support claims with a value "
        "(it answered a protocol version 3 ACQUIRE with 0x10 unsupported protocol version); "
        "claim without a value, or upgrade the server"
    )
    conn.wait_eof()
    fake_server.assert_no_connection(0.5)


@pytest.mark.parametrize(
    ("name", "kwargs", "cls"),
    [
        ("a", {"value": b"v" * 1025}, errors.ValueTooLong),
        ("a", {"value": "é" * 513}, errors.ValueTooLong),  # 1026 bytes of UTF-8
        ("a", {"value": b"v" * 1025, "limit": 2}, errors.ValueTooLong),
        ("a", {"value": b"v" * 1025, "limit": 0}, errors.InvalidMode),  # the mode first
        ("", {"value": b"v" * 1025}, errors.EmptyName),  # the name before the value
        (b"\xff", {"value": b"v" * 1025}, errors.NameNotUTF8),
    ],
    ids=["bytes", "str", "semaphore", "mode-first", "empty-name-first", "bad-name-first"],
)
def test_value_validation_sends_nothing(
    api: Api,
    fake_server: FakeServer,
    name: str | bytes,
    kwargs: dict[str, Any],
    cls: type[errors.ServerError],
) -> None:
    fut = api.acquire(fake_server.address, name, lease=1, **kwargs)
    with pytest.raises(cls) as info:
        fut.result(5)
    assert type(info.value) is cls and not info.value.from_server
    assert not info.value.temporary
    fake_server.assert_no_connection(0.2)


# -- PROCLAIM (protocol version 3) -------------------------------------------------


def granted_with_value(
    api: Api, fake_server: FakeServer, lease: float, value: bytes = b"a"
) -> tuple[LockHandle, FakeConn]:
    """A lock claimed with ``value`` and granted with token 7."""
    fut = api.acquire(fake_server.address, "leader", lease=lease, value=value)
    conn = fake_server.accept()
    want = proto.encode_claim(b"leader", round(lease * 1000), False, 0, value)
    assert conn.read_exact(len(want)) == want
    conn.send(acquired(7))
    return fut.result(5), conn


def test_proclaim_returns_on_its_reply(api: Api, fake_server: FakeServer) -> None:
    """The PROCLAIM goes at once (nothing is in flight); proclaim returns on
    its one reply, which refreshes the lease as a heartbeat's does."""
    handle, conn = granted_with_value(api, fake_server, lease=5)
    before = handle.lock.valid_until
    done = api.pool_call(lambda: handle.proclaim("b"))
    assert conn.read_exact(4) == proto.encode_proclaim(b"b")
    assert handle.lock.value == b"a" and not done.done()  # not acknowledged yet
    conn.send(acquired(7))
    done.result(5)
    assert handle.lock.value == b"b"
    assert handle.lock.valid_until > before
    release_with(handle, conn)


@pytest.mark.parametrize("answer", ["silence", "error"])
def test_a_loss_while_proclaim_waits_is_raised(
    api: Api, fake_server: FakeServer, answer: str
) -> None:
    """Never a hang: a PROCLAIM that is never answered ends at the lock's
    deadline with its loss, and an ERROR ends it at once."""
    lease = 2.0  # the first heartbeat would be due 0.5 s after the grant
    handle, conn = granted_with_value(api, fake_server, lease=lease)
    done = api.pool_call(lambda: handle.proclaim("b"))
    assert conn.read_exact(4) == proto.encode_proclaim(b"b")
    if answer == "error":
        conn.send(proto.encode_error(0x02, "closed by administrator"))
    with pytest.raises(errors.LockLost) as info:
        done.result(2 * lease)
    cause = errors.AdminClosed if answer == "error" else errors.HeartbeatTimeout
    assert isinstance(info.value.cause, cause)
    assert info.value is handle.lock.lost_error
    assert handle.lock.value == b"a"
    with pytest.raises(errors.LockLost):
        handle.proclaim("c")  # nothing more is sent
    conn.wait_eof(timeout=2 * lease, heartbeats=False)


def test_a_release_while_proclaim_waits_is_raised(api: Api, fake_server: FakeServer) -> None:
    handle, conn = granted_with_value(api, fake_server, lease=5)
    done = api.pool_call(lambda: handle.proclaim("b"))
    assert conn.read_exact(4) == proto.encode_proclaim(b"b")
    release_with(handle, conn)
    with pytest.raises(errors.LockReleased):
        done.result(5)
