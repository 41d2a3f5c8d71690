"""The conformance driver speaks the pipe protocol, for both APIs, against
the real server."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from .support import PYTHON_DIR, RealServer, unused_address


class Driver:
    def __init__(self, api: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "conformance_driver", "--api", api],
            cwd=PYTHON_DIR,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.events.put(json.loads(line))

    def send(self, **cmd: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def next(self, timeout: float = 10) -> dict[str, Any]:
        event = self.events.get(timeout=timeout)
        assert isinstance(event.pop("t_ms"), float)
        return event

    def quit(self) -> int:
        self.send(cmd="quit")
        return self.proc.wait(timeout=20)


@pytest.fixture(params=["sync", "asyncio"])
def driver(request: pytest.FixtureRequest) -> Iterator[Driver]:
    d = Driver(request.param)
    yield d
    if d.proc.poll() is None:
        d.proc.kill()
        d.proc.wait()
    for pipe in (d.proc.stdin, d.proc.stdout, d.proc.stderr):
        if pipe is not None:
            pipe.close()


def acquire(
    driver: Driver, server: RealServer, claim_id: str, lock_name: str, **extra: Any
) -> None:
    cmd = {
        "cmd": "acquire",
        "id": claim_id,
        "servers": [server.address],
        "name": lock_name,
        "lease_ms": 1000,
        "mode": "wait",
        "timeout_ms": 5000,
        "connect_timeout_ms": 2000,
    }
    cmd.update(extra)
    driver.send(**cmd)


def test_ready(driver: Driver) -> None:
    ready = driver.next()
    assert ready["event"] == "ready"
    assert ready["client"] in ("python-sync", "python-asyncio")
    assert set(ready["capabilities"]) == {
        "cancel",
        "election",
        "invalid_utf8_names",
        "sessions",
        "shared",
        "tls",
    }
    assert driver.quit() == 0


def test_session(driver: Driver, real_server: RealServer) -> None:
    assert driver.next()["event"] == "ready"
    name = f"drv/{uuid.uuid4().hex[:8]}"
    acquire(driver, real_server, "a", name)
    got = driver.next()
    assert got["event"] == "acquired" and got["id"] == "a"
    assert int(got["token"]) > 0 and 0 < got["valid_ms"] <= 800

    acquire(driver, real_server, "b", name)
    assert driver.next() == {"event": "waiting", "id": "b"}
    acquire(driver, real_server, "c", name, mode="try")
    busy = driver.next()
    assert busy["event"] == "error" and busy["kind"] == "busy" and busy["id"] == "c"

    driver.send(cmd="release", id="a")
    events = [driver.next(), driver.next()]
    released = {"event": "released", "id": "a"}
    assert released in events
    b = next(e for e in events if e != released)
    assert b["event"] == "acquired" and b["id"] == "b"
    assert int(b["token"]) > int(got["token"])

    acquire(driver, real_server, "d", name)
    assert driver.next() == {"event": "waiting", "id": "d"}
    driver.send(cmd="cancel", id="d")
    cancelled = driver.next()
    assert cancelled["event"] == "error" and cancelled["kind"] == "cancelled"
    assert cancelled["code"] is None and cancelled["temporary"] is None

    acquire(driver, real_server, "e", name, timeout_ms=200)
    assert driver.next() == {"event": "waiting", "id": "e"}
    timeout = driver.next()
    assert timeout["event"] == "error" and timeout["kind"] == "timeout"

    driver.send(cmd="bogus", id="x")
    assert driver.next()["event"] == "driver_error"
    assert driver.quit() == 0


def test_sessions(driver: Driver, real_server: RealServer) -> None:
    """The session command, claims on it (granted, queued, cancelled,
    busy), a release of one, and the release of the session's id."""
    assert driver.next()["event"] == "ready"
    name = f"drv/session/{uuid.uuid4().hex[:8]}"
    driver.send(cmd="session", id="s", servers=[real_server.address], lease_ms=1000)
    assert driver.next() == {"event": "opened", "id": "s"}
    acquire(driver, real_server, "a", name, session="s")
    got = driver.next()
    assert got["event"] == "acquired" and got["id"] == "a"
    assert int(got["token"]) > 0 and 0 < got["valid_ms"] <= 800

    acquire(driver, real_server, "b", name, session="s")
    assert driver.next() == {"event": "waiting", "id": "b"}
    driver.send(cmd="cancel", id="b")
    cancelled = driver.next()
    assert cancelled["event"] == "error" and cancelled["kind"] == "cancelled"
    acquire(driver, real_server, "c", name, session="s", mode="try")
    busy = driver.next()
    assert busy["event"] == "error" and busy["kind"] == "busy" and busy["id"] == "c"

    acquire(driver, real_server, "d", name + "/2", session="s")
    held = driver.next()
    assert held["event"] == "acquired" and held["id"] == "d"
    driver.send(cmd="release", id="a")
    assert driver.next() == {"event": "released", "id": "a"}
    driver.send(cmd="release", id="s")  # releases d, not told lost
    assert driver.next() == {"event": "released", "id": "s"}
    acquire(driver, real_server, "e", name + "/2", mode="try")
    again = driver.next()
    assert again["event"] == "acquired" and int(again["token"]) > int(held["token"])

    acquire(driver, real_server, "f", name, session="nope")
    assert driver.next()["event"] == "driver_error"
    assert driver.quit() == 0
    assert driver.events.empty()


def test_session_that_cannot_open(driver: Driver) -> None:
    assert driver.next()["event"] == "ready"
    driver.send(cmd="session", id="s", servers=[unused_address()], lease_ms=1000)
    failed = driver.next()
    assert failed["event"] == "error" and failed["id"] == "s"
    assert failed["kind"] == "connect" and failed["code"] is None
    assert driver.quit() == 0


@pytest.mark.parametrize(
    ("extra", "code"),
    [
        ({"lease_ms": 0}, 23),
        ({"lease_ms": 4294967296}, 23),
        ({"name": ""}, 20),
        ({"name_hex": "ff"}, 22),
        ({"name_hex": "", "lease_ms": 0}, 23),
        ({"name": "x" * 256}, 21),
    ],
)
def test_validation(
    driver: Driver, real_server: RealServer, extra: dict[str, Any], code: int
) -> None:
    assert driver.next()["event"] == "ready"
    acquire(driver, real_server, "v", "unused", **extra)
    err = driver.next()
    assert err["event"] == "error" and err["kind"] == "validation"
    assert err["code"] == code and err["temporary"] is False
    assert driver.quit() == 0


def test_lost_on_shutdown(driver: Driver, fresh_server: RealServer) -> None:
    assert driver.next()["event"] == "ready"
    acquire(driver, fresh_server, "a", "drv/shutdown")
    assert driver.next()["event"] == "acquired"
    fresh_server.terminate()
    lost = driver.next()
    assert lost["event"] == "lost" and lost["kind"] == "server"
    assert lost["code"] == 1 and lost["temporary"] is True
    driver.send(cmd="release", id="a")
    assert driver.next() == {"event": "released", "id": "a"}
    assert driver.quit() == 0


def test_shared_and_limit_fields(driver: Driver, real_server: RealServer) -> None:
    """ "shared" and "limit" reach the client: readers hold together, a
    semaphore of 1 queues its second claimant, "limit": 0 is no bound."""
    assert driver.next()["event"] == "ready"
    name = f"drv/shared/{uuid.uuid4().hex[:8]}"
    acquire(driver, real_server, "r1", name, shared=True)
    acquire(driver, real_server, "r2", name, shared=True, limit=0)
    first, second = driver.next(), driver.next()
    assert {first["id"], second["id"]} == {"r1", "r2"}
    assert first["event"] == second["event"] == "acquired"
    acquire(driver, real_server, "w", name, mode="try")
    busy = driver.next()
    assert busy["event"] == "error" and busy["kind"] == "busy" and busy["id"] == "w"

    sem = f"drv/sem/{uuid.uuid4().hex[:8]}"
    acquire(driver, real_server, "s1", sem, shared=True, limit=1)
    assert driver.next()["event"] == "acquired"
    acquire(driver, real_server, "s2", sem, shared=True, limit=1)
    assert driver.next() == {"event": "waiting", "id": "s2"}
    acquire(driver, real_server, "s3", sem, shared=True, limit=2)
    mismatch = driver.next()
    assert mismatch["event"] == "error" and mismatch["id"] == "s3"
    assert mismatch["code"] == 0x1A and mismatch["temporary"] is False
    assert driver.quit() == 0


@pytest.mark.parametrize("limit", [65536, -1])
def test_invalid_limit_is_a_validation_error(
    driver: Driver, real_server: RealServer, limit: int
) -> None:
    assert driver.next()["event"] == "ready"
    acquire(driver, real_server, "v", "unused", shared=True, limit=limit, name_hex="")
    err = driver.next()
    assert err["event"] == "error" and err["kind"] == "validation"
    assert err["code"] == 0x19 and err["temporary"] is False
    assert driver.quit() == 0


def test_limit_without_shared_is_a_bad_command(driver: Driver, real_server: RealServer) -> None:
    assert driver.next()["event"] == "ready"
    acquire(driver, real_server, "v", "unused", limit=3)
    assert driver.next()["event"] == "driver_error"
    assert driver.quit() == 0


def next_of(driver: Driver, count: int) -> dict[str, dict[str, Any]]:
    """The next ``count`` events, one per id: events of different ids may
    come in either order."""
    events = [driver.next() for _ in range(count)]
    by_id = {e["id"]: e for e in events}
    assert len(by_id) == count, events
    return by_id


def observe(driver: Driver, server: RealServer, observe_id: str, lock_name: str) -> None:
    driver.send(
        cmd="observe", id=observe_id, servers=[server.address], name=lock_name, lease_ms=5000
    )


def test_election(driver: Driver, real_server: RealServer) -> None:
    """observe, a campaign (acquire with a value) and proclaim: every term
    as the follower sees it; a released observe says nothing more."""
    assert driver.next()["event"] == "ready"
    name = f"drv/elect/{uuid.uuid4().hex[:8]}"
    observe(driver, real_server, "w", name)
    none = {"event": "observed", "id": "w", "state": "none", "candidates": 0}
    assert driver.next() == none

    acquire(driver, real_server, "a", name, value="10.0.0.7:80")
    got = next_of(driver, 2)
    token = got["a"]["token"]
    assert got["a"]["event"] == "acquired"
    leader = {**none, "state": "leader", "token": token, "value": "10.0.0.7:80"}
    assert got["w"] == leader

    driver.send(cmd="proclaim", id="a", value="10.0.0.7:81")
    got = next_of(driver, 2)
    assert got["a"] == {"event": "proclaimed", "id": "a"}
    assert got["w"] == {**leader, "value": "10.0.0.7:81"}

    driver.send(cmd="release", id="w")
    assert driver.next() == {"event": "released", "id": "w"}
    driver.send(cmd="release", id="a")
    assert driver.next() == {"event": "released", "id": "a"}
    assert driver.quit() == 0


def test_plain_claim_leads_with_an_empty_value(driver: Driver, real_server: RealServer) -> None:
    assert driver.next()["event"] == "ready"
    name = f"drv/elect/{uuid.uuid4().hex[:8]}"
    acquire(driver, real_server, "p", name)
    token = driver.next()["token"]
    observe(driver, real_server, "w", name)
    assert driver.next() == {
        "event": "observed",
        "id": "w",
        "state": "leader",
        "token": token,
        "value": "",
        "candidates": 0,
    }
    assert driver.quit() == 0


@pytest.mark.parametrize(
    "cmd",
    [
        {"cmd": "proclaim", "id": "nobody", "value": "x"},
        {"cmd": "proclaim", "id": "a"},
        {"cmd": "observe", "id": "w", "name": "x", "lease_ms": 1000},
    ],
    ids=["unknown id", "no value", "no servers"],
)
def test_bad_election_commands(driver: Driver, cmd: dict[str, Any]) -> None:
    assert driver.next()["event"] == "ready"
    driver.send(**cmd)
    assert driver.next()["event"] == "driver_error"
    assert driver.quit() == 0
