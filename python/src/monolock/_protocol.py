"""The monolock wire format, versions 1 to 3: constants, frame encoding,
input validation and an incremental decoder for server frames.

Client -> server::

    ACQUIRE   [0x01][0x01][lease_ms u32][name_len u16][name]
    ACQUIRE   [0x01][0x02][lease_ms u32][mode u8][limit u16][name_len u16][name]
    ACQUIRE   [0x01][0x03][lease_ms u32][mode u8][limit u16][name_len u16][name]
              [value_len u16][value]
    HEARTBEAT [0x02]
    PROCLAIM  [0x03][value_len u16][value]

Version 2 only adds the shared claims and semaphores (mode 1, limit 0 for
any number of holders, N for at most N); exclusive claims are always sent as
version 1, which every server reads. Version 3 adds a value to a claim (0 to
1024 opaque bytes: who holds the lock and how to reach it); a claim is sent
as version 3 only when it has a non-empty value. PROCLAIM replaces the value
of a version 3 claim; the client does not send it yet.

Server -> client::

    WAITING   [0x11]
    ACQUIRED  [0x12][token u64]
    ERROR     [0x13][code u8][reason_len u8][reason]

All integers are big endian. tests/test_protocol.py pins every constant and
byte here against spec/constants.json and spec/vectors/frames.json.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Union

from . import _constants_gen as spec
from .errors import (
    EmptyName,
    InvalidLease,
    InvalidMode,
    NameNotUTF8,
    NameTooLong,
    ProtocolViolation,
    ServerEnded,
    ServerError,
    ValueTooLong,
    error_for_code,
)

VERSION = spec.PROTOCOL_VERSION
VERSION_SHARED = spec.SHARED_PROTOCOL_VERSION

VERSION_VALUE = spec.VALUE_PROTOCOL_VERSION

MODE_EXCLUSIVE = spec.SHARED_MODE_EXCLUSIVE
MODE_SHARED = spec.SHARED_MODE_SHARED
MAX_LIMIT = spec.SHARED_LIMIT_MAX

MSG_ACQUIRE = spec.MESSAGE_TYPES_ACQUIRE
MSG_HEARTBEAT = spec.MESSAGE_TYPES_HEARTBEAT
MSG_PROCLAIM = spec.VALUE_PROCLAIM_TYPE
MSG_WAITING = spec.MESSAGE_TYPES_WAITING
MSG_ACQUIRED = spec.MESSAGE_TYPES_ACQUIRED
MSG_ERROR = spec.MESSAGE_TYPES_ERROR

MAX_NAME_LEN = spec.MAX_NAME_LEN
MAX_REASON_LEN = spec.MAX_REASON_LEN
MAX_VALUE_LEN = spec.VALUE_MAX_VALUE_LEN
MIN_LEASE_MS = spec.LEASE_MS_MIN
MAX_LEASE_MS = spec.LEASE_MS_MAX

_ACQUIRE_HEADER = struct.Struct(">BBIH")
_ACQUIRE_V2_HEADER = struct.Struct(">BBIBHH")
_TOKEN = struct.Struct(">Q")
_VALUE_LEN = struct.Struct(">H")

HEARTBEAT_FRAME = bytes([MSG_HEARTBEAT])


LEASE_RULE = (
    f"lease must be a whole number of milliseconds from {MIN_LEASE_MS} ms to {MAX_LEASE_MS} ms"
)
"""The 0x17 message of every client (spec/constants.json, lease_rule)."""


def validate_lease_ms(lease_ms: int) -> None:
    """Raise :class:`InvalidLease` unless 1 <= lease_ms <= 2**32-1."""
    if not MIN_LEASE_MS <= lease_ms <= MAX_LEASE_MS:
        raise InvalidLease(f"{LEASE_RULE}, got {lease_ms} ms", from_server=False)


def lease_seconds_to_ms(lease: float) -> int:
    """Convert a lease in seconds to whole milliseconds. A lease that is not
    a whole number of milliseconds (0.0015) is refused with
    :class:`InvalidLease`, never rounded, and so is one out of range."""
    if isinstance(lease, bool) or not isinstance(lease, (int, float)):
        raise TypeError(f"monolock: lease must be a number of seconds, not {type(lease).__name__}")
    if isinstance(lease, int):
        lease_ms: int | None = lease * 1000
    else:
        # A float holds most millisecond values only approximately (1.001):
        # it is whole when the nearest whole millisecond is that same float.
        scaled = lease * 1000
        lease_ms = round(scaled) if math.isfinite(scaled) else None
        if lease_ms is not None and lease_ms / 1000 != lease:
            lease_ms = None
    if lease_ms is None or not MIN_LEASE_MS <= lease_ms <= MAX_LEASE_MS:
        raise InvalidLease(f"{LEASE_RULE}, got {lease!r} s", from_server=False)
    return lease_ms


def encode_name(name: str | bytes) -> bytes:
    """Turn a lock name into its wire bytes, applying the server's checks in
    the server's order: empty (0x14), over 255 bytes (0x15), invalid UTF-8
    (0x16). A ``str`` holding lone surrogates counts as invalid UTF-8."""
    if isinstance(name, str):
        raw = name.encode("utf-8", "surrogatepass")
    elif isinstance(name, (bytes, bytearray, memoryview)):
        raw = bytes(name)
    else:
        raise TypeError(f"monolock: lock name must be str or bytes, not {type(name).__name__}")
    if not raw:
        raise EmptyName(from_server=False)
    if len(raw) > MAX_NAME_LEN:
        # Length and limit, never the name: it would fill the screen.
        raise NameTooLong(
            f"lock name too long ({len(raw)} bytes, the limit is {MAX_NAME_LEN})",
            from_server=False,
        )
    try:
        raw.decode("utf-8")  # strict: also refuses encoded surrogates
    except UnicodeDecodeError:
        raise NameNotUTF8(from_server=False) from None
    return raw


def encode_acquire(name: bytes, lease_ms: int) -> bytes:
    """Build an ACQUIRE frame. ``name`` must come from :func:`encode_name`."""
    validate_lease_ms(lease_ms)
    return _ACQUIRE_HEADER.pack(MSG_ACQUIRE, VERSION, lease_ms, len(name)) + name


def validate_mode(mode: int, limit: int) -> None:
    """Raise :class:`InvalidMode` (0x19) for a version 2 mode other than
    exclusive and shared, an exclusive claim with a limit, or a limit that
    does not fit the frame's 16 bits."""
    if mode == MODE_SHARED and 0 <= limit <= MAX_LIMIT:
        return
    if mode == MODE_EXCLUSIVE and limit == 0:
        return
    raise InvalidMode(f"invalid lock mode {mode} with limit {limit}", from_server=False)


def validate_semaphore_limit(limit: int) -> int:
    """Check the permits of a semaphore, 1 to 65535: another whole number
    raises :class:`InvalidMode` (0x19), as the Go client does, and a value
    that is not an ``int`` raises :class:`TypeError`."""
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"monolock: a semaphore's limit must be an int, not {type(limit).__name__}")
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidMode(
            f"a semaphore's limit must be a whole number from 1 to {MAX_LIMIT} permits, "
            f"got {limit}",
            from_server=False,
        )
    return limit


def encode_acquire_v2(name: str | bytes, lease_ms: int, mode: int, limit: int) -> bytes:
    """Build a version 2 ACQUIRE, checking as the server does and in its
    order: the lease (0x17), the mode and limit (0x19), then the name (0x14,
    0x15, 0x16). Send exclusive claims with :func:`encode_acquire` instead."""
    validate_lease_ms(lease_ms)
    validate_mode(mode, limit)
    raw = encode_name(name)
    return (
        _ACQUIRE_V2_HEADER.pack(MSG_ACQUIRE, VERSION_SHARED, lease_ms, mode, limit, len(raw)) + raw
    )


def encode_value(value: str | bytes | None) -> bytes:
    """Turn a claim's value into its wire bytes: ``bytes`` as they are, a
    ``str`` as UTF-8, ``None`` as no value (``b""``; an empty value is no
    value). Over 1024 bytes raises :class:`ValueTooLong` (0x1b)."""
    if value is None:
        return b""
    if isinstance(value, str):
        raw = value.encode("utf-8")
    elif isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
    else:
        raise TypeError(f"monolock: a value must be str or bytes, not {type(value).__name__}")
    validate_value_len(len(raw))
    return raw


def validate_value_len(length: int) -> None:
    """Raise :class:`ValueTooLong` (0x1b) for a value over 1024 bytes."""
    if length > MAX_VALUE_LEN:
        # Length and limit, never the value: it would fill the screen.
        raise ValueTooLong(
            f"value too long ({length} bytes, the limit is {MAX_VALUE_LEN})",
            from_server=False,
        )


def encode_acquire_v3(
    name: str | bytes, lease_ms: int, mode: int, limit: int, value: str | bytes
) -> bytes:
    """Build a version 3 ACQUIRE (a claim with a value), checking as the
    server does and in its order: as version 2 (the lease, the mode and
    limit, the name), then the value's length (0x1b). Send claims without a
    value as version 1 or 2 (:func:`encode_claim` picks)."""
    validate_lease_ms(lease_ms)
    validate_mode(mode, limit)
    raw = encode_name(name)
    raw_value = encode_value(value)
    return b"".join(
        (
            _ACQUIRE_V2_HEADER.pack(MSG_ACQUIRE, VERSION_VALUE, lease_ms, mode, limit, len(raw)),
            raw,
            _VALUE_LEN.pack(len(raw_value)),
            raw_value,
        )
    )


def encode_proclaim(value: str | bytes) -> bytes:
    """Build a PROCLAIM, which replaces the value of a version 3 claim
    (an empty value clears it). Over 1024 bytes raises
    :class:`ValueTooLong`."""
    raw = encode_value(value)
    return bytes([MSG_PROCLAIM]) + _VALUE_LEN.pack(len(raw)) + raw


def encode_claim(name: bytes, lease_ms: int, shared: bool, limit: int, value: bytes = b"") -> bytes:
    """The ACQUIRE of a claim in the lowest version that says what it needs,
    so that it works with every server that can serve it: version 1 for an
    exclusive one, version 2 for a shared one (``limit`` 0: any number of
    holders), version 3 for one with a non-empty ``value`` (from
    :func:`encode_value`)."""
    if value:
        mode = MODE_SHARED if shared else MODE_EXCLUSIVE
        return encode_acquire_v3(name, lease_ms, mode, limit, value)
    if not shared:
        return encode_acquire(name, lease_ms)
    return encode_acquire_v2(name, lease_ms, MODE_SHARED, limit)


def encode_acquired(token: int) -> bytes:
    """Build an ACQUIRED frame (used by tests and fake servers)."""
    return bytes([MSG_ACQUIRED]) + _TOKEN.pack(token)


def encode_error(code: int, reason: str) -> bytes:
    """Build an ERROR frame (used by tests and fake servers). The reason is
    cut to 255 bytes without splitting a character."""
    raw = reason.encode("utf-8")[:MAX_REASON_LEN].decode("utf-8", "ignore").encode("utf-8")
    return bytes([MSG_ERROR, code, len(raw)]) + raw


@dataclass(frozen=True)
class Waiting:
    """A WAITING frame."""


@dataclass(frozen=True)
class Acquired:
    """An ACQUIRED frame with its fencing token."""

    token: int


@dataclass(frozen=True)
class Error:
    """An ERROR frame, as far as it had arrived: an ERROR ends the session
    at its type byte, so the decoder never waits for the rest. ``code`` is
    None when the code byte had not come; ``reason`` holds the reason bytes
    that had come (a cut UTF-8 sequence decodes to U+FFFD)."""

    code: int | None
    reason: str

    def to_exception(self) -> ServerError | ServerEnded:
        """The exception for this code, marked as sent by the server."""
        if self.code is None:
            return ServerEnded()
        return error_for_code(self.code, self.reason)


Frame = Union[Waiting, Acquired, Error]


def parse_error(buf: bytes | bytearray) -> Error:
    """The ERROR at the start of ``buf``, as far as it had arrived."""
    end = 3 + buf[2] if len(buf) >= 3 else len(buf)
    end = min(end, len(buf))
    code = buf[1] if len(buf) >= 2 else None
    return Error(code, bytes(buf[3:end]).decode("utf-8", "replace"))


class FrameDecoder:
    """Cut server frames out of a byte stream.

    Bytes come in whatever pieces the transport delivers: a frame may be
    split over many :meth:`feed` calls and one call may hold several frames.
    An unknown message type raises :class:`ProtocolViolation`; the stream
    cannot be resynchronised after it.

    An ERROR is the last message of a session and ends it at its type byte:
    it is returned at the end of the :meth:`feed` that brought that byte,
    whole or not (see :class:`Error`); what follows it is not decoded.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._ended = False  # an ERROR has been handed on

    def feed(self, data: bytes) -> list[Frame]:
        """Add bytes and return every frame they complete, in order."""
        if self._ended:
            return []
        self._buf += data
        frames: list[Frame] = []
        while True:
            frame, used = self._parse_one()
            if frame is None:
                return frames
            del self._buf[:used]
            frames.append(frame)

    @property
    def buffered(self) -> int:
        """Bytes held back as the start of an incomplete frame."""
        return len(self._buf)

    def _parse_one(self) -> tuple[Frame | None, int]:
        buf = self._buf
        if not buf:
            return None, 0
        kind = buf[0]
        if kind == MSG_WAITING:
            return Waiting(), 1
        if kind == MSG_ACQUIRED:
            if len(buf) < 9:
                return None, 0
            return Acquired(_TOKEN.unpack_from(buf, 1)[0]), 9
        if kind == MSG_ERROR:
            self._ended = True
            return parse_error(buf), len(buf)
        raise ProtocolViolation(f"monolock: server sent unknown message type 0x{kind:02x}")
