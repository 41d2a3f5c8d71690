"""The wire format of a watch (protocol version 3): a connection that names
a lock instead of claiming it.

Client -> server::

    WATCH     [0x04][0x03][lease_ms u32][name_len u16][name][epoch u64][seq u64]
    HEARTBEAT [0x02]

Server -> client::

    EVENT     [0x14][epoch u64][seq u64][kind u8][body by kind]
    WATCHING  [0x15][epoch u64][seq u64]
    ERROR     [0x13][code u8][reason_len u8][reason]

docs/protocol.md ("Version 3: a watch of a name") has the whole design;
tests/test_watch_protocol.py pins every byte against spec/vectors/frames.json.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Union

from . import _constants_gen as spec
from . import _protocol as proto
from .errors import ProtocolViolation

MSG_WATCH = spec.WATCH_WATCH_TYPE
MSG_EVENT = spec.WATCH_EVENT_TYPE
MSG_WATCHING = spec.WATCH_WATCHING_TYPE

EVENT_SNAPSHOT = spec.WATCH_EVENT_KINDS_SNAPSHOT
EVENT_HOLDER = spec.WATCH_EVENT_KINDS_HOLDER
EVENT_WAITER = spec.WATCH_EVENT_KINDS_WAITER
EVENT_SNAPSHOT_END = spec.WATCH_EVENT_KINDS_SNAPSHOT_END
EVENT_GRANTED = spec.WATCH_EVENT_KINDS_GRANTED
EVENT_VALUE = spec.WATCH_EVENT_KINDS_VALUE
EVENT_ENDED = spec.WATCH_EVENT_KINDS_ENDED
EVENT_HELD_BACK = spec.WATCH_EVENT_KINDS_HELD_BACK
EVENT_QUEUED = spec.WATCH_EVENT_KINDS_QUEUED
EVENT_LEFT = spec.WATCH_EVENT_KINDS_LEFT
EVENT_BLOCKED = spec.WATCH_EVENT_KINDS_BLOCKED

SNAPSHOT_FLAG_RESYNC = spec.WATCH_SNAPSHOT_FLAG_RESYNC
MAX_IDENTITY_LEN = spec.WATCH_MAX_IDENTITY_LEN

_WATCH_HEADER = struct.Struct(">BBIH")
_POSITION = struct.Struct(">QQ")


def encode_watch(name: bytes, lease_ms: int, epoch: int = 0, seq: int = 0) -> bytes:
    """Build a WATCH: ``name`` from :func:`_protocol.encode_name`, and
    where the watcher left off (both 0 for a fresh watch)."""
    proto.validate_lease_ms(lease_ms)
    header = _WATCH_HEADER.pack(MSG_WATCH, spec.WATCH_PROTOCOL_VERSION, lease_ms, len(name))
    return header + name + _POSITION.pack(epoch, seq)


@dataclass(frozen=True)
class Event:
    """One EVENT. Which fields a kind carries::

    snapshot      resync, holders, waiters, ms (blocked that long)
    holder        token, mode, limit, ms (held back that long), identity, value
    waiter        arrival, mode, limit, identity, value
    snapshot end  -
    granted       arrival, and a holder's fields
    value         token, value
    ended         token, why
    held back     token, why, ms
    queued        as waiter
    left          arrival
    blocked       ms, why
    """

    epoch: int
    seq: int
    kind: int
    resync: bool = False
    holders: int = 0
    waiters: int = 0
    ms: int = 0
    token: int = 0
    arrival: int = 0
    mode: int = 0
    limit: int = 0
    identity: str = ""
    value: bytes = b""
    why: int = 0


@dataclass(frozen=True)
class Watching:
    """A WATCHING: the answer to the request in flight, naming the last
    event sent before it."""

    epoch: int
    seq: int


WatchFrame = Union[Event, Watching, proto.Error]


def encode_event(e: Event) -> bytes:
    """Build an EVENT (for tests and fake servers)."""
    out = bytearray([MSG_EVENT]) + _POSITION.pack(e.epoch, e.seq) + bytes([e.kind])
    if e.kind == EVENT_SNAPSHOT:
        flags = SNAPSHOT_FLAG_RESYNC if e.resync else 0
        out += struct.pack(">BIII", flags, e.holders, e.waiters, e.ms)
    elif e.kind in (EVENT_HOLDER, EVENT_GRANTED):
        if e.kind == EVENT_GRANTED:
            out += struct.pack(">Q", e.arrival)
        out += struct.pack(">QBHI", e.token, e.mode, e.limit, e.ms) + _who(e)
    elif e.kind in (EVENT_WAITER, EVENT_QUEUED):
        out += struct.pack(">QBH", e.arrival, e.mode, e.limit) + _who(e)
    elif e.kind == EVENT_VALUE:
        out += struct.pack(">QH", e.token, len(e.value)) + e.value
    elif e.kind == EVENT_ENDED:
        out += struct.pack(">QB", e.token, e.why)
    elif e.kind == EVENT_HELD_BACK:
        out += struct.pack(">QBI", e.token, e.why, e.ms)
    elif e.kind == EVENT_LEFT:
        out += struct.pack(">Q", e.arrival)
    elif e.kind == EVENT_BLOCKED:
        out += struct.pack(">IB", e.ms, e.why)
    return bytes(out)


def _who(e: Event) -> bytes:
    identity = e.identity.encode("utf-8")[:MAX_IDENTITY_LEN]
    identity = identity.decode("utf-8", "ignore").encode("utf-8")  # cut at a boundary
    return bytes([len(identity)]) + identity + struct.pack(">H", len(e.value)) + e.value


def encode_watching(epoch: int, seq: int) -> bytes:
    """Build a WATCHING (for tests and fake servers)."""
    return bytes([MSG_WATCHING]) + _POSITION.pack(epoch, seq)


class _Incomplete(Exception):
    """The buffer ends inside the frame: wait for more bytes."""


class _Reader:
    """Big-endian fields from the start of a buffer; short of bytes it
    raises :class:`_Incomplete`."""

    def __init__(self, buf: bytearray) -> None:
        self._buf = buf
        self.pos = 0

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self._buf):
            raise _Incomplete
        data = bytes(self._buf[self.pos : end])
        self.pos = end
        return data

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return int.from_bytes(self.take(2), "big")

    def u32(self) -> int:
        return int.from_bytes(self.take(4), "big")

    def u64(self) -> int:
        return int.from_bytes(self.take(8), "big")

    def value(self) -> bytes:
        # Checked before the value is waited for: a length over the bound
        # is a broken frame however many bytes follow.
        length = self.u16()
        if length > proto.MAX_VALUE_LEN:
            raise ProtocolViolation(
                f"monolock: malformed EVENT: a value over {proto.MAX_VALUE_LEN} bytes"
            )
        return self.take(length)

    def who(self) -> tuple[str, bytes]:
        identity = self.take(self.u8()).decode("utf-8", "replace")
        return identity, self.value()


def _read_event(r: _Reader) -> Event:
    epoch, seq, kind = r.u64(), r.u64(), r.u8()
    if kind == EVENT_SNAPSHOT:
        flags, holders, waiters, ms = r.u8(), r.u32(), r.u32(), r.u32()
        resync = bool(flags & SNAPSHOT_FLAG_RESYNC)
        return Event(epoch, seq, kind, resync=resync, holders=holders, waiters=waiters, ms=ms)
    if kind in (EVENT_HOLDER, EVENT_GRANTED):
        arrival = r.u64() if kind == EVENT_GRANTED else 0
        token, mode, limit, ms = r.u64(), r.u8(), r.u16(), r.u32()
        identity, value = r.who()
        return Event(
            epoch, seq, kind, ms=ms, token=token, arrival=arrival, mode=mode, limit=limit,
            identity=identity, value=value,
        )  # fmt: skip
    if kind in (EVENT_WAITER, EVENT_QUEUED):
        arrival, mode, limit = r.u64(), r.u8(), r.u16()
        identity, value = r.who()
        return Event(
            epoch, seq, kind, arrival=arrival, mode=mode, limit=limit, identity=identity,
            value=value,
        )  # fmt: skip
    if kind == EVENT_SNAPSHOT_END:
        return Event(epoch, seq, kind)
    if kind == EVENT_VALUE:
        token = r.u64()
        return Event(epoch, seq, kind, token=token, value=r.value())
    if kind == EVENT_ENDED:
        token, why = r.u64(), r.u8()
        return Event(epoch, seq, kind, token=token, why=why)
    if kind == EVENT_HELD_BACK:
        token, why, ms = r.u64(), r.u8(), r.u32()
        return Event(epoch, seq, kind, token=token, why=why, ms=ms)
    if kind == EVENT_LEFT:
        return Event(epoch, seq, kind, arrival=r.u64())
    if kind == EVENT_BLOCKED:
        ms, why = r.u32(), r.u8()
        return Event(epoch, seq, kind, ms=ms, why=why)
    raise ProtocolViolation(f"monolock: malformed EVENT: unknown kind {kind}")


class WatchDecoder:
    """Cut a watch's server frames out of a byte stream, as
    :class:`_protocol.FrameDecoder` does a claim's: frames may come split
    or several per :meth:`feed`. An ERROR ends the watch at its type byte
    (what of it had arrived is returned); a malformed EVENT or an unknown
    message type raises :class:`ProtocolViolation`."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._ended = False

    def feed(self, data: bytes) -> list[WatchFrame]:
        """Add bytes and return every frame they complete, in order."""
        if self._ended:
            return []
        self._buf += data
        frames: list[WatchFrame] = []
        while self._buf:
            kind = self._buf[0]
            if kind == proto.MSG_ERROR:
                frames.append(proto.parse_error(self._buf))
                self._buf.clear()
                self._ended = True
                return frames
            frame = self._parse(kind)
            if frame is None:
                return frames
            frames.append(frame)
        return frames

    def _parse(self, kind: int) -> Event | Watching | None:
        r = _Reader(self._buf)
        r.pos = 1
        try:
            if kind == MSG_EVENT:
                frame: Event | Watching = _read_event(r)
            elif kind == MSG_WATCHING:
                frame = Watching(r.u64(), r.u64())
            else:
                raise ProtocolViolation(f"monolock: server sent unknown message type 0x{kind:02x}")
        except _Incomplete:
            return None
        del self._buf[: r.pos]
        return frame
