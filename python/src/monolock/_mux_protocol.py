"""The wire format of a session (protocol version 4): one connection that
carries many claims, each a *stream* with an id the client picks.

Client -> server::

    SESSION   [0x05][0x04][lease_ms u32]            the first frame
    OPEN      [0x06][stream u32][a whole ACQUIRE or WATCH]
    ON        [0x07][stream u32][a whole PROCLAIM]
    RELEASE   [0x08][stream u32]
    HEARTBEAT [0x02]

Server -> client::

    SESSION_OK [0x16][max_streams u32]
    STREAM     [0x17][stream u32][WAITING, ACQUIRED, EVENT or WATCHING]
    RELEASED   [0x18][stream u32]
    STREAM_END [0x19][stream u32][code u8][reason_len u8][reason]
    ALIVE      [0x1a]
    ERROR      [0x13]...   ends the whole session at its type byte

docs/protocol.md ("Version 4: sessions") has the rules; tests/test_mux_protocol.py
pins every byte against spec/vectors/frames.json.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Union

from . import _constants_gen as spec
from . import _protocol as proto
from . import _watch_protocol as wp
from .errors import BadStream, MonolockError, ProtocolViolation, error_for_code

VERSION = spec.SESSION_PROTOCOL_VERSION
MSG_SESSION = spec.SESSION_SESSION_TYPE
MSG_OPEN = spec.SESSION_OPEN_TYPE
MSG_ON = spec.SESSION_ON_TYPE
MSG_RELEASE = spec.SESSION_RELEASE_TYPE
MSG_SESSION_OK = spec.SESSION_SESSION_OK_TYPE
MSG_STREAM = spec.SESSION_STREAM_TYPE
MSG_RELEASED = spec.SESSION_RELEASED_TYPE
MSG_STREAM_END = spec.SESSION_STREAM_END_TYPE
MSG_ALIVE = spec.SESSION_ALIVE_TYPE
MAX_STREAM_ID = spec.SESSION_MAX_STREAM_ID

SERVER_TYPES = frozenset(
    (MSG_SESSION_OK, MSG_STREAM, MSG_RELEASED, MSG_STREAM_END, MSG_ALIVE, proto.MSG_ERROR)
)
"""The first byte of every frame a session server may send."""

_U32 = struct.Struct(">I")
_SESSION = struct.Struct(">BBI")
_STREAM_HEAD = struct.Struct(">BI")
ALIVE_FRAME = bytes([MSG_ALIVE])


# -- client frames ------------------------------------------------------------


def encode_session(lease_ms: int) -> bytes:
    """Build a SESSION (checks the lease as an ACQUIRE's: 0x17)."""
    proto.validate_lease_ms(lease_ms)
    return _SESSION.pack(MSG_SESSION, VERSION, lease_ms)


def validate_stream_id(stream: int) -> None:
    """Refuse an id the wire cannot carry or the server would end the
    session for (0x1c): ids are 1 to 2**32-1."""
    if not 1 <= stream <= MAX_STREAM_ID:
        raise BadStream(f"stream id {stream} is not from 1 to {MAX_STREAM_ID}", from_server=False)


def encode_open(stream: int, inner: bytes) -> bytes:
    """Build an OPEN carrying a whole ACQUIRE or WATCH (``inner``, from
    :func:`_protocol.encode_claim` or :func:`_watch_protocol.encode_watch`)."""
    validate_stream_id(stream)
    if not inner or inner[0] not in (proto.MSG_ACQUIRE, wp.MSG_WATCH):
        raise ValueError("an OPEN carries an ACQUIRE or a WATCH")
    return _STREAM_HEAD.pack(MSG_OPEN, stream) + inner


def encode_on(stream: int, value: bytes) -> bytes:
    """Build an ON carrying a PROCLAIM of ``value`` (wire bytes, at most 1024)."""
    validate_stream_id(stream)
    return _STREAM_HEAD.pack(MSG_ON, stream) + proto.encode_proclaim(value)


def encode_release(stream: int) -> bytes:
    """Build a RELEASE."""
    validate_stream_id(stream)
    return _STREAM_HEAD.pack(MSG_RELEASE, stream)


# -- server frames ------------------------------------------------------------


@dataclass(frozen=True)
class SessionOk:
    """The answer to SESSION: how many streams may be open at once."""

    max_streams: int


@dataclass(frozen=True)
class Stream:
    """One frame of one stream: WAITING, ACQUIRED, EVENT or WATCHING."""

    stream: int
    inner: proto.Waiting | proto.Acquired | wp.Event | wp.Watching


@dataclass(frozen=True)
class Released:
    """The answer to RELEASE: the claim is out of the server's table."""

    stream: int


@dataclass(frozen=True)
class StreamEnd:
    """A stream that ended by itself (refused, kicked, a watch behind)."""

    stream: int
    code: int
    reason: str

    def to_exception(self) -> MonolockError:
        """The error class of the code, marked as sent by the server."""
        return error_for_code(self.code, self.reason)


@dataclass(frozen=True)
class Alive:
    """The answer to HEARTBEAT: it vouches for every stream."""


SessionFrame = Union[SessionOk, Stream, Released, StreamEnd, Alive, proto.Error]


def encode_session_ok(max_streams: int) -> bytes:
    """Build a SESSION_OK (for tests and fake servers)."""
    return bytes([MSG_SESSION_OK]) + _U32.pack(max_streams)


def encode_stream(stream: int, inner: bytes) -> bytes:
    """Build a STREAM around a whole server frame (for tests and fake servers)."""
    return _STREAM_HEAD.pack(MSG_STREAM, stream) + inner


def encode_released(stream: int) -> bytes:
    """Build a RELEASED (for tests and fake servers)."""
    return _STREAM_HEAD.pack(MSG_RELEASED, stream)


def encode_stream_end(stream: int, code: int, reason: str) -> bytes:
    """Build a STREAM_END (for tests and fake servers); the reason is cut
    to 255 bytes as an ERROR's is."""
    return _STREAM_HEAD.pack(MSG_STREAM_END, stream) + proto.encode_error(code, reason)[1:]


class SessionDecoder:
    """Cut a session's server frames out of a byte stream, split or several
    per :meth:`feed` as TCP delivers them. An ERROR ends the session at its
    type byte (what of it had arrived is returned, nothing after it is
    decoded); an unknown type, inner or not, raises
    :class:`ProtocolViolation`, after which nothing can be decoded."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._ended = False

    def feed(self, data: bytes) -> list[SessionFrame]:
        """Add bytes and return every frame they complete, in order."""
        if self._ended:
            return []
        self._buf += data
        frames: list[SessionFrame] = []
        while self._buf:
            if self._buf[0] == proto.MSG_ERROR:
                frames.append(proto.parse_error(self._buf))
                self._buf.clear()
                self._ended = True
                return frames
            try:
                frame = self._parse()
            except ProtocolViolation:
                self._ended = True
                raise
            if frame is None:
                return frames
            frames.append(frame)
        return frames

    @property
    def buffered(self) -> int:
        """Bytes held back as the start of an incomplete frame."""
        return len(self._buf)

    def _parse(self) -> SessionFrame | None:
        r = wp._Reader(self._buf)
        kind = r.u8() if self._buf else 0
        try:
            frame: SessionFrame
            if kind == MSG_ALIVE:
                frame = Alive()
            elif kind == MSG_SESSION_OK:
                frame = SessionOk(r.u32())
            elif kind == MSG_RELEASED:
                frame = Released(r.u32())
            elif kind == MSG_STREAM_END:
                stream, code = r.u32(), r.u8()
                reason = r.take(r.u8()).decode("utf-8", "replace")
                frame = StreamEnd(stream, code, reason)
            elif kind == MSG_STREAM:
                stream = r.u32()
                frame = Stream(stream, _read_inner(r))
            else:
                raise ProtocolViolation(f"monolock: server sent unknown message type 0x{kind:02x}")
        except wp._Incomplete:
            return None
        del self._buf[: r.pos]
        return frame


def _read_inner(r: wp._Reader) -> proto.Waiting | proto.Acquired | wp.Event | wp.Watching:
    kind = r.u8()
    if kind == proto.MSG_WAITING:
        return proto.Waiting()
    if kind == proto.MSG_ACQUIRED:
        return proto.Acquired(r.u64())
    if kind == wp.MSG_EVENT:
        return wp._read_event(r)
    if kind == wp.MSG_WATCHING:
        return wp.Watching(r.u64(), r.u64())
    raise ProtocolViolation(f"monolock: server sent a STREAM carrying message type 0x{kind:02x}")
