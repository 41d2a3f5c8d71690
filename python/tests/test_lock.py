"""The lock state both APIs share and the handler that carries out session
events: loss told before close, one decision for polls and push signals,
release, callbacks, check(). A real session core on the real clock, no
sockets."""

from __future__ import annotations

import logging
import time

import pytest

from monolock import _protocol as proto
from monolock import errors
from monolock._lock import BaseLock, ConnectionHandler, LostCallback
from monolock._session import Session, SessionEvent

MS = 1_000_000


class CountingFlag:
    """A lost event that counts how often it is set."""

    def __init__(self) -> None:
        self.times_set = 0

    def set(self) -> None:
        self.times_set += 1


class FakeLock(BaseLock[CountingFlag]):
    def __init__(self, session: Session) -> None:
        super().__init__(session, CountingFlag())


class Recorder(ConnectionHandler[FakeLock]):
    """A connection whose transport is a list of what was done to it."""

    def __init__(self, session: Session, on_lost: LostCallback | None = None) -> None:
        super().__init__(session, None, on_lost)
        self.done: list[str] = []

    def feed(self, events: list[SessionEvent]) -> None:
        self._process(events)

    def _write(self, data: bytes) -> None:
        self.done.append(f"write {data.hex()}")

    def _close_transport(self, handback: bool) -> None:
        assert self.lock is not None
        told = self.lock.lost.times_set
        self.done.append(f"close handback={handback} told={told}")

    def _outcome_known(self) -> None:
        self.done.append("outcome")

    def _make_lock(self) -> FakeLock:
        return FakeLock(self.session)

    def _wake_proclaimers(self) -> None:
        pass  # nobody proclaims here


def granted(lease_ms: int = 1000, age_ms: int = 0, on_lost: LostCallback | None = None) -> Recorder:
    """A connection whose lock was granted at ACQUIRE ``age_ms`` ago."""
    start = time.monotonic_ns() - age_ms * MS
    conn = Recorder(Session(b"jobs/x", lease_ms), on_lost)
    conn.feed(conn.session.start(start))
    conn.feed(conn.session.receive_data(proto.encode_acquired(7), start))
    assert conn.lock is not None
    return conn


def test_fresh_lock() -> None:
    conn = granted(lease_ms=10_000)
    lock = conn.lock
    assert lock is not None
    assert lock.held and not lock.is_lost and lock.lost_error is None and not lock.released
    assert lock.name == "jobs/x" and lock.token == 7 and lock.lease == 10.0
    assert 7 < lock.remaining <= 8
    assert lock.valid_until == pytest.approx(time.monotonic() + lock.remaining, abs=0.05)
    lock.check()
    assert repr(lock) == "<FakeLock 'jobs/x' token=7 held>"
    assert conn.done == ["write 01010000271000066a6f62732f78", "outcome"]


def test_a_poll_decides_and_the_push_tells_the_same_loss_before_the_close() -> None:
    seen: list[errors.LockLost] = []
    conn = granted(lease_ms=1000, age_ms=900, on_lost=seen.append)  # deadline passed
    lock = conn.lock
    assert lock is not None
    # Polled first: lost at once, although the connection has not ticked.
    assert not lock.held and lock.is_lost and lock.remaining == 0
    loss = lock.lost_error
    assert isinstance(loss, errors.LockLost) and isinstance(loss.cause, errors.HeartbeatTimeout)
    with pytest.raises(errors.LockLost) as info:
        lock.check()
    assert info.value is loss
    assert lock.lost.times_set == 0 and seen == []  # the push comes from the connection
    conn.done.clear()
    conn.feed(conn.session.tick(time.monotonic_ns()))
    assert lock.lost.times_set == 1 and seen == [loss]
    assert conn.done == []  # told, still open: the close waits for the lease
    conn.feed(conn.session.tick(time.monotonic_ns() + 200 * MS))
    assert conn.done == ["close handback=False told=1"]
    assert lock.lost_error is loss and "lost" in repr(lock)


def test_server_error_is_told_then_closed_in_one_step() -> None:
    conn = granted()
    lock = conn.lock
    assert lock is not None
    conn.done.clear()
    kick = proto.encode_error(0x02, "kick")
    conn.feed(conn.session.receive_data(kick, time.monotonic_ns()))
    assert conn.done == ["close handback=False told=1"]
    loss = lock.lost_error
    assert loss is not None and isinstance(loss.cause, errors.AdminClosed) and loss.code == 0x02


def test_callbacks_run_once_and_late_ones_at_once() -> None:
    conn = granted()
    lock = conn.lock
    assert lock is not None
    seen: list[errors.LockLost] = []
    lock.add_lost_callback(seen.append)
    removed: list[errors.LockLost] = []
    lock.add_lost_callback(removed.append)
    lock.remove_lost_callback(removed.append)
    conn.feed(conn.session.connection_lost())
    conn.feed(conn.session.connection_lost())
    assert lock.lost.times_set == 1 and removed == [] and seen == [lock.lost_error]
    late: list[errors.LockLost] = []
    lock.add_lost_callback(late.append)  # already told: called at once
    assert late == seen


def test_release_silences_loss() -> None:
    conn = granted(lease_ms=1000)
    lock = conn.lock
    assert lock is not None
    seen: list[errors.LockLost] = []
    lock.add_lost_callback(seen.append)
    assert lock._mark_released()
    assert not lock._mark_released()
    conn.done.clear()
    conn.feed(conn.session.tick(time.monotonic_ns()))
    assert conn.done == ["close handback=True told=0"]
    # The deadline passes after the release: no loss is decided.
    assert conn.session.poll(time.monotonic_ns() + 5000 * MS) is None
    assert seen == [] and not lock.is_lost and lock.lost.times_set == 0 and not lock.held
    with pytest.raises(errors.LockReleased):
        lock.check()


def test_failing_callback_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    conn = granted()
    lock = conn.lock
    assert lock is not None

    def boom(err: errors.LockLost) -> None:
        raise RuntimeError("boom")

    after: list[errors.LockLost] = []
    lock.add_lost_callback(boom)
    lock.add_lost_callback(after.append)
    with caplog.at_level(logging.ERROR, logger="monolock"):
        conn.feed(conn.session.connection_lost())
    assert len(after) == 1
    assert "raised" in caplog.text and "boom" in caplog.text
