"""Frames and validation against spec/constants.json and
spec/vectors/frames.json."""

from __future__ import annotations

from typing import Any

import pytest

from monolock import _protocol as proto
from monolock import errors

from .support import load_spec

CONSTANTS = load_spec("constants.json")
FRAMES = load_spec("vectors/frames.json")


def test_constants_match_spec() -> None:
    assert proto.VERSION == CONSTANTS["protocol_version"]
    types = CONSTANTS["message_types"]
    assert proto.MSG_ACQUIRE == types["ACQUIRE"]
    assert proto.MSG_HEARTBEAT == types["HEARTBEAT"]
    assert proto.MSG_WAITING == types["WAITING"]
    assert proto.MSG_ACQUIRED == types["ACQUIRED"]
    assert proto.MSG_ERROR == types["ERROR"]
    assert proto.MAX_NAME_LEN == CONSTANTS["max_name_len"]
    assert proto.MIN_LEASE_MS == CONSTANTS["lease_ms"]["min"]
    assert proto.MAX_LEASE_MS == CONSTANTS["lease_ms"]["max"]


@pytest.mark.parametrize("vec", FRAMES["client_valid"], ids=lambda v: v["desc"])
def test_client_frames(vec: dict[str, Any]) -> None:
    expected = bytes.fromhex(vec["hex"])
    if vec["type"] == "HEARTBEAT":
        assert expected == proto.HEARTBEAT_FRAME
        return
    for name in (vec["name"], vec["name"].encode("utf-8")):
        raw = proto.encode_name(name)
        assert proto.encode_acquire(raw, vec["lease_ms"]) == expected


def feed_whole(decoder: proto.FrameDecoder, data: bytes) -> list[proto.Frame]:
    return decoder.feed(data)


def feed_bytewise(decoder: proto.FrameDecoder, data: bytes) -> list[proto.Frame]:
    frames: list[proto.Frame] = []
    for i in range(len(data)):
        got = decoder.feed(data[i : i + 1])
        # A frame completes only on its last byte; an ERROR on its first.
        last = 0 if data[0] == proto.MSG_ERROR else len(data) - 1
        assert len(got) == (1 if i == last else 0)
        frames += got
    return frames


def expected_frame(vec: dict[str, Any]) -> proto.Frame:
    if vec["type"] == "WAITING":
        return proto.Waiting()
    if vec["type"] == "ACQUIRED":
        return proto.Acquired(int(vec["token"]))
    return proto.Error(vec["code"], vec["reason"])


@pytest.mark.parametrize("feed", [feed_whole, feed_bytewise])
@pytest.mark.parametrize("vec", FRAMES["server_valid"], ids=lambda v: v["desc"])
def test_server_frames(vec: dict[str, Any], feed: Any) -> None:
    data = bytes.fromhex(vec["hex"])
    decoder = proto.FrameDecoder()
    want = expected_frame(vec)
    if feed is feed_bytewise and isinstance(want, proto.Error):
        want = proto.Error(None, "")  # an ERROR ends the session at its type byte
    assert feed(decoder, data) == [want]
    assert decoder.buffered == 0


@pytest.mark.parametrize("vec", FRAMES["server_error_cut"], ids=lambda v: v["desc"])
def test_server_error_cut(vec: dict[str, Any]) -> None:
    decoder = proto.FrameDecoder()
    assert decoder.feed(bytes.fromhex(vec["hex"])) == [proto.Error(vec["code"], vec["reason"])]
    assert decoder.feed(b"\x7f\x13\x01") == []  # nothing after an ERROR is decoded
    exc = proto.Error(vec["code"], vec["reason"]).to_exception()
    assert exc.code == vec["code"]
    if vec["code"] is None:
        assert isinstance(exc, errors.ServerEnded)


@pytest.mark.parametrize("vec", FRAMES["server_valid"], ids=lambda v: v["desc"])
def test_server_frames_encode(vec: dict[str, Any]) -> None:
    frame = expected_frame(vec)
    if isinstance(frame, proto.Acquired):
        assert proto.encode_acquired(frame.token) == bytes.fromhex(vec["hex"])
    elif isinstance(frame, proto.Error):
        assert frame.code is not None
        assert proto.encode_error(frame.code, frame.reason) == bytes.fromhex(vec["hex"])


def test_all_server_frames_in_one_read_and_every_split() -> None:
    replies = [v for v in FRAMES["server_valid"] if v["type"] != "ERROR"]
    last = next(v for v in FRAMES["server_valid"] if v["type"] == "ERROR")
    stream = b"".join(bytes.fromhex(v["hex"]) for v in [*replies, last])
    expected = [expected_frame(v) for v in [*replies, last]]
    assert proto.FrameDecoder().feed(stream) == expected
    # Every cut of the stream into two reads gives the same frames, except
    # that a cut inside the ERROR ends it with what the first read held.
    start = len(stream) - len(bytes.fromhex(last["hex"]))
    for cut in range(len(stream) + 1):
        decoder = proto.FrameDecoder()
        want = expected
        if start < cut < len(stream):
            head = stream[start:cut]
            code = head[1] if len(head) > 1 else None
            reason = head[3:].decode("utf-8", "replace")
            want = [*expected[:-1], proto.Error(code, reason)]
        assert decoder.feed(stream[:cut]) + decoder.feed(stream[cut:]) == want, cut


def test_error_frame_converts_to_its_exception() -> None:
    data = proto.encode_error(0x13, "unknown message type: 0x7f")
    frame = proto.FrameDecoder().feed(data)[0]
    assert isinstance(frame, proto.Error)
    exc = frame.to_exception()
    assert isinstance(exc, errors.UnknownMessage)
    assert exc.reason == "unknown message type: 0x7f"


@pytest.mark.parametrize("kind", [0x00, 0x01, 0x02, 0x10, 0x14, 0x7F, 0xFF])
def test_unknown_server_message_type(kind: int) -> None:
    decoder = proto.FrameDecoder()
    with pytest.raises(errors.ProtocolViolation, match=f"0x{kind:02x}"):
        decoder.feed(bytes([0x11, kind]))


@pytest.mark.parametrize("vec", FRAMES["client_invalid"], ids=lambda v: v["desc"])
def test_client_invalid_inputs(vec: dict[str, Any]) -> None:
    """Lease first, then the name, each with the server's code."""
    raw = bytes.fromhex(vec["name_hex"])

    def validate(name: str | bytes) -> None:
        lease_ms = vec["lease_ms"]
        proto.validate_lease_ms(lease_ms)
        proto.encode_acquire(proto.encode_name(name), lease_ms)

    candidates: list[str | bytes] = [raw]
    # The same name as text, when Python can hold it in a str.
    candidates.append(raw.decode("utf-8", "surrogateescape"))
    for name in candidates:
        with pytest.raises(errors.ServerError) as info:
            validate(name)
        assert info.value.code == vec["code"]
        assert type(info.value) is errors.ERRORS_BY_CODE[vec["code"]]
        assert not info.value.from_server
        assert info.value.temporary is False


def test_str_with_lone_surrogate_is_not_utf8() -> None:
    with pytest.raises(errors.NameNotUTF8):
        proto.encode_name("a\ud800")


@pytest.mark.parametrize(
    ("seconds", "lease_ms"),
    [
        (0.001, 1),
        (1, 1000),
        (2.5, 2500),
        (1.001, 1001),
        (4294967.295, 4294967295),
        (4294967, 4294967000),
    ],
)
def test_lease_seconds_to_ms(seconds: float, lease_ms: int) -> None:
    assert proto.lease_seconds_to_ms(seconds) == lease_ms


def test_every_whole_millisecond_is_taken_as_it_is() -> None:
    # What a caller writes as ms / 1000 is never refused for float error.
    samples = [*range(1, 20_001), *range(4294967295 - 20_000, 4294967296), 123456789]
    for lease_ms in samples:
        assert proto.lease_seconds_to_ms(lease_ms / 1000) == lease_ms, lease_ms


@pytest.mark.parametrize(
    "seconds",
    [
        *(0, 0.0004, 0.0014, 0.0015, 1.0005, 2.0001, -1, -0.001),
        *(4294967.296, 1e308, 10**30, float("nan"), float("inf")),
    ],
)
def test_invalid_lease_seconds(seconds: float) -> None:
    """Out of range, or not a whole number of milliseconds: refused, never
    rounded or truncated (spec/constants.json, lease_rule)."""
    with pytest.raises(errors.InvalidLease) as info:
        proto.lease_seconds_to_ms(seconds)
    error = info.value
    assert error.code == 0x17 and not error.from_server
    assert str(error) == (
        "monolock: lease must be a whole number of milliseconds from 1 ms to 4294967295 ms, "
        f"got {seconds!r} s (0x17)"
    )


def test_name_too_long_gives_length_and_limit_not_the_name() -> None:
    name = "n" * 300
    with pytest.raises(errors.NameTooLong) as info:
        proto.encode_name(name)
    assert str(info.value) == "monolock: lock name too long (300 bytes, the limit is 255) (0x15)"
    with pytest.raises(errors.NameTooLong, match=r"\(256 bytes, the limit is 255\)"):
        proto.encode_name("é" * 128)  # counted in bytes of UTF-8


def test_lease_must_be_a_number() -> None:
    with pytest.raises(TypeError):
        proto.lease_seconds_to_ms("10")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        proto.encode_name(5)  # type: ignore[arg-type]


def test_long_reason_is_cut_on_a_character_boundary() -> None:
    frame = proto.encode_error(1, "é" * 200)
    assert frame[2] == 254
    decoded = proto.FrameDecoder().feed(frame)[0]
    assert decoded == proto.Error(1, "é" * 127)


@pytest.mark.parametrize("vec", FRAMES["client_valid_v2"], ids=lambda v: v["desc"])
def test_client_frames_v2(vec: dict[str, Any]) -> None:
    expected = bytes.fromhex(vec["hex"])
    for name in (vec["name"], vec["name"].encode("utf-8")):
        assert proto.encode_acquire_v2(name, vec["lease_ms"], vec["mode"], vec["limit"]) == expected
    if vec["mode"] == proto.MODE_SHARED:
        raw = proto.encode_name(vec["name"])
        assert proto.encode_claim(raw, vec["lease_ms"], True, vec["limit"]) == expected


@pytest.mark.parametrize("vec", FRAMES["client_invalid_v2"], ids=lambda v: v["desc"])
def test_client_invalid_inputs_v2(vec: dict[str, Any]) -> None:
    """Lease first, then the mode and limit, then the name."""
    name = bytes.fromhex(vec["name_hex"]) if "name_hex" in vec else vec["name"]
    with pytest.raises(errors.ServerError) as info:
        proto.encode_acquire_v2(name, vec["lease_ms"], vec["mode"], vec["limit"])
    assert info.value.code == vec["code"]
    assert type(info.value) is errors.ERRORS_BY_CODE[vec["code"]]
    assert not info.value.from_server
    assert info.value.temporary is False


def test_constants_match_spec_v2() -> None:
    shared = CONSTANTS["shared"]
    assert proto.VERSION_SHARED == shared["protocol_version"]
    assert proto.MODE_EXCLUSIVE == shared["mode_exclusive"]
    assert proto.MODE_SHARED == shared["mode_shared"]
    assert proto.MAX_LIMIT == shared["limit_max"]


def test_exclusive_claims_send_version_1() -> None:
    raw = proto.encode_name("a")
    assert proto.encode_claim(raw, 1000, False, 0) == proto.encode_acquire(raw, 1000)
    assert proto.encode_claim(raw, 1000, False, 0)[1] == proto.VERSION


@pytest.mark.parametrize("limit", [0, -1, 65536, 2**40])
def test_semaphore_limit_out_of_range(limit: int) -> None:
    with pytest.raises(errors.InvalidMode) as info:
        proto.validate_semaphore_limit(limit)
    assert str(info.value) == (
        "monolock: a semaphore's limit must be a whole number from 1 to 65535 permits, "
        f"got {limit} (0x19)"
    )
    assert info.value.code == 0x19 and not info.value.from_server and not info.value.temporary


@pytest.mark.parametrize("limit", [1, 3, 65535])
def test_semaphore_limit_in_range(limit: int) -> None:
    assert proto.validate_semaphore_limit(limit) == limit


@pytest.mark.parametrize("limit", [True, 2.0, "3", None])
def test_semaphore_limit_must_be_an_int(limit: Any) -> None:
    with pytest.raises(TypeError):
        proto.validate_semaphore_limit(limit)


# -- a value per claim (protocol version 3) --------------------------------------


def vector_value(vec: dict[str, Any]) -> bytes:
    return bytes.fromhex(vec["value_hex"]) if "value_hex" in vec else vec["value"].encode("utf-8")


def test_constants_match_spec_v3() -> None:
    value = CONSTANTS["value"]
    assert proto.VERSION_VALUE == value["protocol_version"]
    assert proto.MAX_VALUE_LEN == value["max_value_len"]
    assert proto.MSG_PROCLAIM == value["proclaim_type"]


@pytest.mark.parametrize("vec", FRAMES["client_valid_v3"], ids=lambda v: v["desc"])
def test_client_frames_v3(vec: dict[str, Any]) -> None:
    expected = bytes.fromhex(vec["hex"])
    value = vector_value(vec)
    values: list[str | bytes] = [value] if "value_hex" in vec else [vec["value"], value]
    if vec["type"] == "PROCLAIM":
        for v in values:
            assert proto.encode_proclaim(v) == expected
        return
    for name in (vec["name"], vec["name"].encode("utf-8")):
        for v in values:
            frame = proto.encode_acquire_v3(name, vec["lease_ms"], vec["mode"], vec["limit"], v)
            assert frame == expected
    # What the client sends for the claim: the same bytes.
    raw = proto.encode_name(vec["name"])
    shared = vec["mode"] == proto.MODE_SHARED
    assert proto.encode_claim(raw, vec["lease_ms"], shared, vec["limit"], value) == expected


@pytest.mark.parametrize("vec", FRAMES["client_invalid_v3"], ids=lambda v: v["desc"])
def test_client_invalid_inputs_v3(vec: dict[str, Any]) -> None:
    """As version 2 (lease, mode and limit, name), then the value's length."""
    name = bytes.fromhex(vec["name_hex"]) if "name_hex" in vec else vec["name"]
    value = b"v" * vec["value_len"]
    with pytest.raises(errors.ServerError) as info:
        proto.encode_acquire_v3(name, vec["lease_ms"], vec["mode"], vec["limit"], value)
    assert info.value.code == vec["code"]
    assert type(info.value) is errors.ERRORS_BY_CODE[vec["code"]]
    assert not info.value.from_server
    assert info.value.temporary is False


def test_claims_without_a_value_keep_versions_1_and_2() -> None:
    raw = proto.encode_name("a")
    assert proto.encode_claim(raw, 1000, False, 0, b"") == proto.encode_acquire(raw, 1000)
    assert proto.encode_claim(raw, 1000, True, 3, b"") == proto.encode_acquire_v2(
        raw, 1000, proto.MODE_SHARED, 3
    )
    assert proto.encode_value(None) == b"" and proto.encode_value("") == b""


def test_value_too_long_says_length_and_limit() -> None:
    with pytest.raises(errors.ValueTooLong) as info:
        proto.encode_value("é" * 513)  # 1026 bytes, 513 characters
    assert str(info.value) == ("monolock: value too long (1026 bytes, the limit is 1024) (0x1b)")
    assert info.value.code == 0x1B and not info.value.from_server and not info.value.temporary
    with pytest.raises(errors.ValueTooLong):
        proto.encode_proclaim(b"v" * 1025)
    assert proto.encode_value(b"v" * 1024) == b"v" * 1024


def test_value_must_be_str_or_bytes() -> None:
    with pytest.raises(TypeError):
        proto.encode_value(5)  # type: ignore[arg-type]
