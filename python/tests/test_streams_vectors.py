"""The sans-IO session core (protocol version 4) against every case of
spec/vectors/streams.json: timed event sequences of one connection, one
lease, many claims. Each input is fed as the owner or the application
would feed it (server frames as whole bytes), the core is ticked at the
same instant, and what it did is described in the vectors' words and order:
``ready``, the tells by stream id, ``ended``, the sends, ``close``."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from monolock import _mux_protocol as mp
from monolock import _protocol as proto
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

from .support import load_spec

STREAMS = load_spec("vectors/streams.json")
FRAMES = load_spec("vectors/frames.json")
MS = 1_000_000  # nanoseconds
NAME = "a"

STATES = {
    MuxPhase.CONNECTING: "connecting",
    MuxPhase.READY: "live",
    MuxPhase.LOST: "timed out",
    MuxPhase.CLOSED: "closed",
}


def acquire_frame(lease_ms: int) -> bytes:
    """The ACQUIRE every OPEN carries: frames.json's client_valid one of
    name ``a`` with the session's lease."""
    for v in FRAMES["client_valid"]:
        if v["type"] == "ACQUIRE" and v["name"] == NAME and v["lease_ms"] == lease_ms:
            return bytes.fromhex(v["hex"])
    raise AssertionError(f"frames.json has no ACQUIRE of {NAME!r} with lease {lease_ms}")


def test_frame_builders_match_the_spec() -> None:
    """The builders the runner feeds with write the spec's bytes."""
    for v in FRAMES["server_valid_session"]:
        data = bytes.fromhex(v["hex"])
        if v["type"] == "SESSION_OK":
            assert mp.encode_session_ok(v["max_streams"]) == data, v["desc"]
        elif v["type"] == "RELEASED":
            assert mp.encode_released(v["stream"]) == data, v["desc"]
        elif v["type"] == "ALIVE":
            assert mp.ALIVE_FRAME == data, v["desc"]
    assert acquire_frame(1000) == proto.encode_acquire(proto.encode_name(NAME), 1000)


def number(word: str) -> int:
    return int(word, 16) if word.startswith("0x") else int(word)


def server_bytes(words: list[str]) -> bytes:
    """One whole server frame, from a ``recv`` input's words."""
    kind, args = words[0], [number(w) for w in words[1:]]
    if kind == "SESSION_OK":
        return mp.encode_session_ok(args[0])
    if kind == "ALIVE":
        return mp.ALIVE_FRAME
    if kind == "WAITING":
        return mp.encode_stream(args[0], bytes([proto.MSG_WAITING]))
    if kind == "ACQUIRED":
        return mp.encode_stream(args[0], proto.encode_acquired(args[1]))
    if kind == "RELEASED":
        return mp.encode_released(args[0])
    if kind == "STREAM_END":
        return mp.encode_stream_end(args[0], args[1], "")
    if kind == "ERROR":
        return proto.encode_error(args[0], "")
    raise AssertionError(f"unknown frame {words}")


def cause(error: BaseException | None) -> str:
    """The cause word of a ``lost``, ``fail`` or ``ended`` output."""
    if isinstance(error, errors.LockLost):
        error = error.cause
    if isinstance(error, errors.ServerError):
        assert error.code is not None
        return f"server 0x{error.code:02x}"
    if isinstance(error, errors.HeartbeatTimeout):
        return "timeout"
    if isinstance(error, errors.ProtocolViolation):
        return "protocol"
    if isinstance(error, errors.LockBusy):
        return "busy"
    if isinstance(error, errors.ConnectionClosed):
        return "io"
    raise AssertionError(f"no vector word for {error!r}")


def tell(stream: ClaimStream) -> str | None:
    """What a :class:`Changed` of a claim tells its owner, from where the
    claim now stands (``None``: nothing yet, e.g. a RELEASE still owed)."""
    phase, sid = stream.phase, stream.id
    if phase is StreamPhase.WAITING:
        return f"waiting {sid}"
    if phase is StreamPhase.HELD:
        return f"grant {sid} {stream.token}"
    if phase is StreamPhase.FAILED:
        return f"fail {sid} {cause(stream.error)}"
    if phase is StreamPhase.LOST:
        return f"lost {sid} {cause(stream.loss)}"
    if phase is StreamPhase.RELEASED and stream.released_acked:
        if stream.error is not None:  # a try claim let go on WAITING: busy
            return f"fail {sid} {cause(stream.error)}"
        return f"released {sid}"
    return None


def describe_sends(data: bytes, acquire: bytes) -> list[str]:
    """Written bytes as ``send ...`` outputs, frame by frame."""
    out: list[str] = []
    while data:
        kind = data[0]
        if kind == mp.MSG_SESSION:
            out.append("send SESSION")
            data = data[6:]
        elif kind == proto.MSG_HEARTBEAT:
            out.append("send HEARTBEAT")
            data = data[1:]
        elif kind == mp.MSG_OPEN:
            (sid,) = struct.unpack_from(">I", data, 1)
            assert data[5 : 5 + len(acquire)] == acquire, "an OPEN carries the case's ACQUIRE"
            out.append(f"send OPEN {sid}")
            data = data[5 + len(acquire) :]
        elif kind == mp.MSG_RELEASE:
            (sid,) = struct.unpack_from(">I", data, 1)
            out.append(f"send RELEASE {sid}")
            data = data[5:]
        else:
            return [*out, f"send unknown 0x{kind:02x}"]
    return out


class Runner:
    """One case's core, its claims by id, and the vectors' words for them."""

    def __init__(self, lease_ms: int) -> None:
        self.lease_ms = lease_ms
        self.acquire = acquire_frame(lease_ms)
        self.core = MuxCore(lease_ms, server="s:1")
        self.claims: dict[int, ClaimStream] = {}

    def step(self, line: str, now: int) -> list[str]:
        words = line.split()
        core = self.core
        events: list[MuxEvent] = []
        settled: list[str] = []  # claims the application's own call released
        acked = {sid: s.released_acked for sid, s in self.claims.items()}
        what = words[0]
        if what == "connect":
            events += core.start(now)
        elif what == "timer":
            events += core.tick(now)
        elif what == "eof":
            events += core.connection_lost(None)
        elif what == "close":
            core.close()
        elif what == "open":
            try:
                stream = core.open(
                    proto.encode_name(NAME),
                    shared=False, limit=0, value=b"", try_only=words[1] == "try",
                )  # fmt: skip
            except errors.ConnectionClosed:
                return ["refused"]
            self.claims[stream.id] = stream
        elif what == "release":
            core.release_stream(self.claims[number(words[1])])
        elif what == "recv":
            events += core.receive_data(server_bytes(words[1:]), now)
        else:
            raise AssertionError(f"unknown input {line!r}")
        if what in ("release", "close"):
            # The application's call settles a claim with nothing left to
            # wait for at once, as its return does: "released".
            for sid, s in sorted(self.claims.items()):
                if s.released_acked and not acked[sid]:
                    settled.append(f"released {sid}")
        if what != "timer" and not any(isinstance(e, Close) for e in events):
            events += core.tick(now)
        return self.describe(settled, events)

    def describe(self, settled: list[str], events: list[MuxEvent]) -> list[str]:
        """The step's outputs in the vectors' order: ready, the tells by
        stream id, ended, the sends, close."""
        if any(isinstance(e, Close) for e in events):
            # Every tell is carried out before the connection is closed.
            assert isinstance(events[-1], Close), events
        ready: list[str] = []
        tells: list[tuple[int, str]] = [(number(t.split()[1]), t) for t in settled]
        ended: list[str] = []
        sends = b""
        close: list[str] = []
        for e in events:
            if isinstance(e, Ready):
                ready.append("ready")
            elif isinstance(e, Changed):
                stream = self.core.streams.get(e.stream) or self.claims.get(e.stream)
                assert isinstance(stream, ClaimStream), e
                told = tell(stream)
                if told is not None:
                    tells.append((e.stream, told))
            elif isinstance(e, Lost):
                tells.append((e.stream.id, f"lost {e.stream.id} {cause(e.error)}"))
            elif isinstance(e, Ended):
                ended.append(f"ended {cause(e.error)}")
            elif isinstance(e, Send):
                sends += e.data
            elif isinstance(e, Close):
                close.append("close")
        tells.sort(key=lambda t: t[0])  # stable: one stream's tells keep their order
        return [
            *ready,
            *(t for _, t in tells),
            *ended,
            *describe_sends(sends, self.acquire),
            *close,
        ]


@pytest.mark.parametrize("case", STREAMS["cases"], ids=[c["name"] for c in STREAMS["cases"]])
def test_streams_vector(case: dict[str, Any]) -> None:
    runner = Runner(case["lease_ms"])
    for i, st in enumerate(case["steps"], 1):
        now = round(st["at"] * MS)
        where = f"step {i} ({st['in']} at {st['at']})"
        assert runner.step(st["in"], now) == st["out"], where
        if "state" in st:
            assert STATES.get(runner.core.phase) == st["state"], where
        if "valid_until" in st:
            assert runner.core.expires_at / MS == pytest.approx(st["valid_until"], abs=1e-6), (
                f"{where}: valid_until"
            )
