"""The session codec (protocol version 4) against spec/vectors/frames.json
and spec/constants.json: every client frame encoded, every server frame
decoded whole, byte by byte and at every cut."""

from __future__ import annotations

from typing import Any

import pytest

from monolock import _mux_protocol as mp
from monolock import _protocol as proto
from monolock import _watch_protocol as wp
from monolock import errors

from .support import load_spec

FRAMES = load_spec("vectors/frames.json")
CONSTANTS = load_spec("constants.json")


def test_constants_match_spec() -> None:
    s = CONSTANTS["session"]
    assert mp.VERSION == s["protocol_version"]
    assert (mp.MSG_SESSION, mp.MSG_OPEN, mp.MSG_ON, mp.MSG_RELEASE) == (
        s["session_type"], s["open_type"], s["on_type"], s["release_type"],
    )  # fmt: skip
    assert (mp.MSG_SESSION_OK, mp.MSG_STREAM, mp.MSG_RELEASED, mp.MSG_STREAM_END) == (
        s["session_ok_type"], s["stream_type"], s["released_type"], s["stream_end_type"],
    )  # fmt: skip
    assert mp.MSG_ALIVE == s["alive_type"]
    assert mp.MAX_STREAM_ID == s["max_stream_id"]


def inner_frame(inner: dict[str, Any]) -> bytes:
    name = proto.encode_name(inner["name"])
    if inner["type"] == "WATCH":
        return wp.encode_watch(name, inner["lease_ms"], int(inner["epoch"]), int(inner["seq"]))
    shared = inner["mode"] == proto.MODE_SHARED
    value = inner["value"].encode("utf-8")
    return proto.encode_claim(name, inner["lease_ms"], shared, inner["limit"], value)


def encode_client(vec: dict[str, Any]) -> bytes:
    kind = vec["type"]
    if kind == "SESSION":
        return mp.encode_session(vec["lease_ms"])
    if kind == "OPEN":
        return mp.encode_open(vec["stream"], inner_frame(vec["inner"]))
    if kind == "ON":
        return mp.encode_on(vec["stream"], vec["value"].encode("utf-8"))
    if kind == "RELEASE":
        return mp.encode_release(vec["stream"])
    assert kind == "HEARTBEAT"
    return proto.HEARTBEAT_FRAME


@pytest.mark.parametrize("vec", FRAMES["client_valid_session"], ids=lambda v: v["desc"])
def test_client_frames(vec: dict[str, Any]) -> None:
    assert encode_client(vec).hex() == vec["hex"]


def expected_server(vec: dict[str, Any]) -> mp.SessionFrame:
    kind = vec["type"]
    if kind == "SESSION_OK":
        return mp.SessionOk(vec["max_streams"])
    if kind == "RELEASED":
        return mp.Released(vec["stream"])
    if kind == "STREAM_END":
        return mp.StreamEnd(vec["stream"], vec["code"], vec["reason"])
    if kind == "ALIVE":
        return mp.Alive()
    assert kind == "STREAM"
    inner = vec["inner"]
    frame: Any
    if inner["type"] == "WAITING":
        frame = proto.Waiting()
    elif inner["type"] == "ACQUIRED":
        frame = proto.Acquired(int(inner["token"]))
    elif inner["type"] == "WATCHING":
        frame = wp.Watching(int(inner["epoch"]), int(inner["seq"]))
    else:
        (frame,) = wp.WatchDecoder().feed(bytes.fromhex(inner["hex"]))
    return mp.Stream(vec["stream"], frame)


def encode_server(frame: mp.SessionFrame) -> bytes:
    if isinstance(frame, mp.SessionOk):
        return mp.encode_session_ok(frame.max_streams)
    if isinstance(frame, mp.Released):
        return mp.encode_released(frame.stream)
    if isinstance(frame, mp.StreamEnd):
        return mp.encode_stream_end(frame.stream, frame.code, frame.reason)
    if isinstance(frame, mp.Alive):
        return mp.ALIVE_FRAME
    assert isinstance(frame, mp.Stream)
    inner = frame.inner
    if isinstance(inner, proto.Waiting):
        raw = bytes([proto.MSG_WAITING])
    elif isinstance(inner, proto.Acquired):
        raw = proto.encode_acquired(inner.token)
    elif isinstance(inner, wp.Watching):
        raw = wp.encode_watching(inner.epoch, inner.seq)
    else:
        assert isinstance(inner, wp.Event)
        raw = wp.encode_event(inner)
    return mp.encode_stream(frame.stream, raw)


@pytest.mark.parametrize("vec", FRAMES["server_valid_session"], ids=lambda v: v["desc"])
def test_server_frames(vec: dict[str, Any]) -> None:
    data = bytes.fromhex(vec["hex"])
    want = expected_server(vec)
    decoder = mp.SessionDecoder()
    assert decoder.feed(data) == [want]
    assert decoder.buffered == 0
    bytewise = mp.SessionDecoder()
    got: list[mp.SessionFrame] = []
    for i in range(len(data)):
        got += bytewise.feed(data[i : i + 1])
    assert got == [want]
    assert encode_server(want) == data


def test_every_server_frame_in_one_read_and_at_every_cut() -> None:
    vecs = FRAMES["server_valid_session"]
    stream = b"".join(bytes.fromhex(v["hex"]) for v in vecs)
    want = [expected_server(v) for v in vecs]
    assert mp.SessionDecoder().feed(stream) == want
    for cut in range(len(stream) + 1):
        decoder = mp.SessionDecoder()
        assert decoder.feed(stream[:cut]) + decoder.feed(stream[cut:]) == want, cut


def test_an_error_ends_the_session_at_its_type_byte() -> None:
    decoder = mp.SessionDecoder()
    assert decoder.feed(mp.ALIVE_FRAME + b"\x13") == [mp.Alive(), proto.Error(None, "")]
    assert decoder.feed(b"\x01\x00" + mp.ALIVE_FRAME) == []  # nothing after it
    whole = mp.SessionDecoder().feed(proto.encode_error(0x1C, "bad stream id"))
    assert whole == [proto.Error(0x1C, "bad stream id")]


@pytest.mark.parametrize(
    "data",
    [b"\x11", b"\x12" + bytes(8), b"\x05\x04\x00\x00\x00\x01", b"\x17\x00\x00\x00\x01\x13\x01\x00"],
    ids=["bare WAITING", "bare ACQUIRED", "a client frame", "an ERROR inside a STREAM"],
)
def test_frames_of_no_session_are_violations(data: bytes) -> None:
    decoder = mp.SessionDecoder()
    with pytest.raises(errors.ProtocolViolation):
        decoder.feed(data)
    assert decoder.feed(mp.ALIVE_FRAME) == []  # the stream cannot be resynchronised


@pytest.mark.parametrize("stream", [0, -1, 2**32])
def test_stream_ids_out_of_range_are_refused_before_sending(stream: int) -> None:
    for encode in (mp.encode_release, lambda s: mp.encode_on(s, b"v")):
        with pytest.raises(errors.BadStream) as info:
            encode(stream)
        assert not info.value.from_server and info.value.code == 0x1C


def test_open_carries_only_an_acquire_or_a_watch() -> None:
    with pytest.raises(ValueError):
        mp.encode_open(1, proto.HEARTBEAT_FRAME)


def test_session_lease_is_checked() -> None:
    with pytest.raises(errors.InvalidLease):
        mp.encode_session(0)
    with pytest.raises(errors.InvalidLease):
        mp.encode_session(2**32)


def test_stream_end_converts_to_its_exception() -> None:
    exc = mp.StreamEnd(3, 0x05, "too many streams").to_exception()
    assert isinstance(exc, errors.TooManyStreams) and exc.temporary and exc.from_server
    kicked = mp.StreamEnd(3, 0x02, "").to_exception()
    assert isinstance(kicked, errors.AdminClosed)
