"""The watch's frames (protocol version 3) against spec/vectors/frames.json:
client_valid_watch, server_valid_watch and server_invalid_watch, decoded
whole, byte by byte and several at once."""

from __future__ import annotations

from typing import Any

import pytest

from monolock import _protocol as proto
from monolock import _watch_protocol as wp
from monolock.errors import ProtocolViolation, ServerEnded, WatcherBehind

from .support import load_spec

FRAMES = load_spec("vectors/frames.json")

KINDS = {
    "snapshot": wp.EVENT_SNAPSHOT,
    "holder": wp.EVENT_HOLDER,
    "waiter": wp.EVENT_WAITER,
    "snapshot_end": wp.EVENT_SNAPSHOT_END,
    "granted": wp.EVENT_GRANTED,
    "value": wp.EVENT_VALUE,
    "ended": wp.EVENT_ENDED,
    "held_back": wp.EVENT_HELD_BACK,
    "queued": wp.EVENT_QUEUED,
    "left": wp.EVENT_LEFT,
    "blocked": wp.EVENT_BLOCKED,
}


def num(text: str | None) -> int:
    return int(text) if text else 0


def event_of(vec: dict[str, Any]) -> wp.Event:
    """The vector's fields as an Event (the vectors' numbers are strings,
    since they exceed JSON's exact integers)."""
    return wp.Event(
        epoch=num(vec.get("epoch")),
        seq=num(vec.get("seq")),
        kind=KINDS[vec["kind"]],
        resync=vec.get("resync", False),
        holders=vec.get("holders", 0),
        waiters=vec.get("waiters", 0),
        ms=vec.get("ms", 0),
        token=num(vec.get("token")),
        arrival=num(vec.get("arrival")),
        mode=vec.get("mode", 0),
        limit=vec.get("limit", 0),
        identity=vec.get("identity", ""),
        value=vec.get("value", "").encode("utf-8"),
        why=vec.get("why", 0),
    )


def frame_of(vec: dict[str, Any]) -> wp.Event | wp.Watching:
    if vec["type"] == "WATCHING":
        return wp.Watching(num(vec["epoch"]), num(vec["seq"]))
    return event_of(vec)


@pytest.mark.parametrize("vec", FRAMES["client_valid_watch"], ids=lambda v: v["desc"])
def test_watch_frames(vec: dict[str, Any]) -> None:
    raw = proto.encode_name(vec["name"])
    frame = wp.encode_watch(raw, vec["lease_ms"], num(vec["epoch"]), num(vec["seq"]))
    assert frame.hex() == vec["hex"]


@pytest.mark.parametrize("vec", FRAMES["server_valid_watch"], ids=lambda v: v["desc"])
def test_server_frames_both_ways(vec: dict[str, Any]) -> None:
    want = frame_of(vec)
    encoded = wp.encode_watching(want.epoch, want.seq) if isinstance(want, wp.Watching) else None
    if isinstance(want, wp.Event):
        encoded = wp.encode_event(want)
    assert encoded is not None and encoded.hex() == vec["hex"]
    assert wp.WatchDecoder().feed(bytes.fromhex(vec["hex"])) == [want]


@pytest.mark.parametrize("vec", FRAMES["server_valid_watch"], ids=lambda v: v["desc"])
def test_server_frames_byte_by_byte(vec: dict[str, Any]) -> None:
    decoder = wp.WatchDecoder()
    data = bytes.fromhex(vec["hex"])
    got = []
    for i in range(len(data)):
        got += decoder.feed(data[i : i + 1])
        assert got == [] or i == len(data) - 1, "a frame before its last byte"
    assert got == [frame_of(vec)]


def test_every_server_frame_in_one_read() -> None:
    vectors = FRAMES["server_valid_watch"]
    data = b"".join(bytes.fromhex(v["hex"]) for v in vectors)
    assert wp.WatchDecoder().feed(data) == [frame_of(v) for v in vectors]


@pytest.mark.parametrize("vec", FRAMES["server_invalid_watch"], ids=lambda v: v["desc"])
def test_malformed_events(vec: dict[str, Any]) -> None:
    with pytest.raises(ProtocolViolation, match="malformed EVENT"):
        wp.WatchDecoder().feed(bytes.fromhex(vec["hex"]))


def test_error_ends_the_watch_at_its_type_byte() -> None:
    decoder = wp.WatchDecoder()
    watching = wp.encode_watching(1, 2)
    frames = decoder.feed(watching + proto.encode_error(WatcherBehind.code, "slow")[:4])
    assert frames[0] == wp.Watching(1, 2)
    error = frames[1]
    assert isinstance(error, proto.Error) and error.code == WatcherBehind.code
    assert isinstance(error.to_exception(), WatcherBehind)
    assert decoder.feed(b"more") == []


def test_error_cut_before_its_code() -> None:
    frames = wp.WatchDecoder().feed(bytes([proto.MSG_ERROR]))
    assert len(frames) == 1 and isinstance(frames[0], proto.Error)
    assert isinstance(frames[0].to_exception(), ServerEnded)


def test_unknown_message_type() -> None:
    with pytest.raises(ProtocolViolation, match="unknown message type 0x12"):
        wp.WatchDecoder().feed(bytes([proto.MSG_ACQUIRED]) + bytes(8))
