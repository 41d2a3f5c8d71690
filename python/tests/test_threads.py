"""The blocking client's threads: the one keeper thread does every
connection's I/O, the calling thread waits for it (and runs on_waiting),
and lost callbacks run on teller threads (issue 16: a thread pool of
callers must not make the total rate fall)."""

from __future__ import annotations

import concurrent.futures
import socket
import threading
import time
import uuid

import pytest

import monolock
from monolock import _protocol as proto
from monolock import _reactor, errors
from monolock import client as sync_client
from monolock._connection import Connection

from .support import FakeServer, RealServer, assert_on_time, unused_address


def unused_port() -> int:
    return int(unused_address().rsplit(":", 1)[1])


def unique(prefix: str) -> str:
    return f"py/{prefix}/{uuid.uuid4().hex[:8]}"


def keeper_state() -> tuple[int, int]:
    """(connections with a timer, sockets watched besides the wake-up one)."""
    keeper = _reactor.keeper()
    return len(keeper._timed), len(keeper._poller) - 1


def wait_for(condition: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


def test_acquire_and_release_start_no_thread(real_server: RealServer) -> None:
    client = monolock.Client(real_server.address, lease=5)
    with client.lock(unique("warm")):
        pass  # the first grant starts the keeper
    before = threading.active_count()
    for i in range(20):
        with client.lock(unique(f"cycle{i}")) as held:
            assert threading.active_count() == before
            assert held.held
    assert threading.active_count() == before
    assert keeper_state() == (0, 0)


def test_a_thread_pool_of_callers(real_server: RealServer) -> None:
    """16 threads in acquire -> release loops, with some locks held across
    the others' cycles: every cycle succeeds, tokens are unique, and the
    keeper lets go of every connection."""
    client = monolock.Client(real_server.address, lease=2)
    prefix = unique("pool")
    long_held = [client.acquire(f"{prefix}/held/{i}") for i in range(4)]

    def loop(worker: int) -> list[int]:
        tokens = []
        for n in range(25):
            with client.lock(f"{prefix}/{worker}/{n}", timeout=10) as held:
                tokens.append(held.token)
        return tokens

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        results = list(pool.map(loop, range(16)))
    tokens = [t for r in results for t in r] + [h.token for h in long_held]
    assert len(set(tokens)) == len(tokens) == 16 * 25 + 4
    assert keeper_state() == (4, 4)
    for held in long_held:
        assert held.held, held.lost_error
        held.release()
    assert keeper_state() == (0, 0)


def test_a_short_lease_granted_after_a_long_one_keeps_its_heartbeats(
    real_server: RealServer,
) -> None:
    """The keeper sleeps until the long lease's first heartbeat; a lock
    with a much shorter lease granted afterwards must wake it up earlier."""
    long_lock = monolock.Client(real_server.address, lease=60).acquire(unique("long"))
    time.sleep(0.05)  # let the keeper go to sleep for the long lease
    lease = 0.4
    short = monolock.Client(real_server.address, lease=lease).acquire(unique("short"))
    time.sleep(5 * lease)
    assert short.lost_error is None, "the short lease's heartbeats did not go out"
    assert short.valid_until > time.monotonic()
    short.release()
    long_lock.release()


def test_a_slow_lost_callback_holds_up_no_other_lock(fake_server: FakeServer) -> None:
    """Lost callbacks run on teller threads, a new one when all are busy:
    a callback that blocks delays neither another lock's loss nor its
    close."""
    lease = 2.0
    client = monolock.Client(fake_server.address, lease=lease)
    told: dict[str, float] = {}
    release_slow = threading.Event()

    def slow(err: errors.LockLost) -> None:
        told["slow"] = time.monotonic()
        release_slow.wait(10)  # a callback that blocks, against the advice

    locks = []
    conns = []
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for i, name in enumerate(("slow", "fast")):
            fut = pool.submit(client.acquire, name)
            conn = fake_server.accept()
            conn.read_acquire()
            conn.send(proto.encode_acquired(i + 1))
            locks.append(fut.result(5))
            conns.append(conn)
    slow_lock, fast_lock = locks
    slow_lock.add_lost_callback(slow)
    fast_lock.add_lost_callback(lambda err: told.setdefault("fast", time.monotonic()))
    # Heartbeats are never acknowledged: both locks are lost at valid_until.
    wait_for(lambda: "slow" in told)
    wait_for(lambda: "fast" in told)
    assert_on_time("the other lock's loss", told["fast"], fast_lock.valid_until, late=0.15 * lease)
    fast_closed = conns[1].wait_eof(timeout=5, heartbeats=True)
    assert_on_time(
        "the other lock's close, a lease after its last ack",
        fast_closed,
        fast_lock.valid_until + 0.2 * lease,
        late=0.25 * lease,
    )
    # The slow lock's connection stays open while its callback runs...
    assert isinstance(slow_lock._conn, Connection)
    assert slow_lock._conn._sock.fileno() != -1
    release_slow.set()
    # ...and closes once told (its lease has passed by now).
    conns[0].wait_eof(timeout=5, heartbeats=True)
    for lock in locks:
        lock.release()


def test_on_waiting_runs_in_the_acquiring_thread(real_server: RealServer) -> None:
    client = monolock.Client(real_server.address, lease=2)
    name = unique("waiting-thread")
    holder = client.acquire(name)
    seen: list[threading.Thread] = []
    result: list[monolock.Lock] = []

    def queued(lock_name: str) -> None:
        seen.append(threading.current_thread())

    def wait() -> None:
        result.append(client.acquire(name, on_waiting=queued))

    waiter = threading.Thread(target=wait)
    waiter.start()
    wait_for(lambda: bool(seen))
    holder.release()
    waiter.join(10)
    assert seen == [waiter]
    result[0].release()


def test_a_host_name_is_resolved_and_each_address_tried(
    real_server: RealServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host name is resolved in the caller's thread (the keeper never
    blocks); where it stands for several addresses (localhost: ::1 and
    127.0.0.1 on some hosts, the server listens on the second) the keeper
    goes on to the next, as create_connection does."""
    port = int(real_server.address.rsplit(":", 1)[1])
    with monolock.Client(f"localhost:{port}", lease=2).lock(unique("localhost")) as held:
        assert held.held
    refused = unused_port()
    candidates = [
        (socket.AF_INET, socket.IPPROTO_TCP, ("127.0.0.1", refused)),
        (socket.AF_INET, socket.IPPROTO_TCP, ("127.0.0.1", port)),
    ]
    monkeypatch.setattr(sync_client, "_addresses", lambda address: list(candidates))
    with monolock.Client(f"example.invalid:{port}", lease=2).lock(unique("two")) as held:
        assert held.held
    candidates.pop()  # only the refused one: its error is the attempt's
    with pytest.raises(errors.ConnectError, match="refused"):
        monolock.Client(f"example.invalid:{port}", lease=2).try_acquire(unique("none"))


def test_a_bug_on_the_keeper_ends_only_its_claim(
    real_server: RealServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An exception in the keeper's handling of one connection fails that
    claim with an error (its caller does not hang) and leaves the keeper
    serving the others."""
    client = monolock.Client(real_server.address, lease=2)
    # A long lease: no heartbeat ack for it to read while _read is broken.
    other = monolock.Client(real_server.address, lease=60).acquire(unique("bystander"))

    def broken(self: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(sync_client._Connection, "_read", broken)
    with pytest.raises(errors.ConnectionClosed, match="boom"):
        client.try_acquire(unique("victim"))
    monkeypatch.undo()
    assert "boom" in caplog.text
    with client.lock(unique("after")) as held:
        assert held.held
    assert other.held
    other.release()
