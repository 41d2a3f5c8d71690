"""The lock state both APIs share: loss, release, callbacks, check()."""

from __future__ import annotations

import logging
import time

import pytest

from monolock import errors
from monolock._lock import BaseLock


class CountingFlag:
    """A lost event that counts how often it is set."""

    def __init__(self) -> None:
        self.times_set = 0

    def set(self) -> None:
        self.times_set += 1


class FakeLock(BaseLock[CountingFlag]):
    def __init__(self, valid_for: float = 10.0) -> None:
        super().__init__("jobs/x", 7, 1000, time.monotonic() + valid_for, CountingFlag())


def test_fresh_lock() -> None:
    lock = FakeLock()
    assert lock.held and lock.lost_error is None and not lock.released
    assert lock.name == "jobs/x" and lock.token == 7 and lock.lease == 1.0
    assert 9 < lock.remaining <= 10
    lock.check()
    assert repr(lock) == "<FakeLock 'jobs/x' token=7 held>"


def test_loss_runs_callbacks_once() -> None:
    lock = FakeLock()
    seen: list[errors.LockLost] = []
    lock.add_lost_callback(seen.append)
    removed: list[errors.LockLost] = []
    lock.add_lost_callback(removed.append)
    lock.remove_lost_callback(removed.append)
    cause = errors.ShuttingDown()
    lock._mark_lost(cause)
    lock._mark_lost(errors.AdminClosed())  # only the first loss counts
    assert lock.lost.times_set == 1 and removed == []
    assert len(seen) == 1 and seen[0].cause is cause and seen[0] is lock.lost_error
    with pytest.raises(errors.LockLost) as info:
        lock.check()
    assert info.value.code == 0x01
    assert not lock.held and lock.remaining == 0
    late: list[errors.LockLost] = []
    lock.add_lost_callback(late.append)  # already lost: called at once
    assert late == [lock.lost_error]
    assert "lost" in repr(lock)


def test_release_silences_loss() -> None:
    lock = FakeLock()
    seen: list[errors.LockLost] = []
    lock.add_lost_callback(seen.append)
    assert lock._mark_released()
    assert not lock._mark_released()
    lock._mark_lost(errors.ConnectionClosed("eof"))
    assert seen == [] and lock.lost_error is None and lock.lost.times_set == 0
    with pytest.raises(errors.LockReleased):
        lock.check()


def test_check_refuses_a_passed_deadline_before_the_loss_is_reported() -> None:
    lock = FakeLock(valid_for=-0.001)
    assert not lock.held
    with pytest.raises(errors.LockLost) as info:
        lock.check()
    assert isinstance(info.value.cause, errors.HeartbeatTimeout)


def test_failing_callback_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    lock = FakeLock()

    def boom(err: errors.LockLost) -> None:
        raise RuntimeError("boom")

    after: list[errors.LockLost] = []
    lock.add_lost_callback(boom)
    lock.add_lost_callback(after.append)
    with caplog.at_level(logging.ERROR, logger="monolock"):
        lock._mark_lost(errors.ConnectionClosed("eof"))
    assert len(after) == 1
    assert "raised" in caplog.text and "boom" in caplog.text
