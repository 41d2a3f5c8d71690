package protocol

// Protocol version 3: the watch of a name.
//
//	WATCH    [0x04][0x03][lease_ms uint32][name_len uint16][name bytes][epoch uint64][seq uint64]
//	EVENT    [0x14][epoch uint64][seq uint64][kind uint8][body by kind]
//	WATCHING [0x15][epoch uint64][seq uint64]
//
// A watch is a connection that names a lock instead of claiming it: it
// gets the lock's state, then every change in order, each numbered in its
// name's history. docs/protocol.md has the whole design.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/monolock/monolock/go/internal/spec"
)

// The watch's message types.
const (
	MsgWatch    uint8 = spec.WatchWatchType
	MsgEvent    uint8 = spec.WatchEventType
	MsgWatching uint8 = spec.WatchWatchingType
)

// The kinds of EVENT.
const (
	EventSnapshot    uint8 = spec.WatchEventKindsSnapshot
	EventHolder      uint8 = spec.WatchEventKindsHolder
	EventWaiter      uint8 = spec.WatchEventKindsWaiter
	EventSnapshotEnd uint8 = spec.WatchEventKindsSnapshotEnd
	EventGranted     uint8 = spec.WatchEventKindsGranted
	EventValue       uint8 = spec.WatchEventKindsValue
	EventEnded       uint8 = spec.WatchEventKindsEnded
	EventHeldBack    uint8 = spec.WatchEventKindsHeldBack
	EventQueued      uint8 = spec.WatchEventKindsQueued
	EventLeft        uint8 = spec.WatchEventKindsLeft
	EventBlocked     uint8 = spec.WatchEventKindsBlocked
)

// Why a holding ended (EventEnded), was held back (EventHeldBack), or a
// name is blocked (EventBlocked).
const (
	EndReleased    uint8 = spec.WatchEndReasonsReleased
	EndExpired     uint8 = spec.WatchEndReasonsExpired
	EndKicked      uint8 = spec.WatchEndReasonsKicked
	EndReset       uint8 = spec.WatchEndReasonsReset
	EndSteppedDown uint8 = spec.WatchEndReasonsSteppedDown
	EndFailed      uint8 = spec.WatchEndReasonsFailed

	HoldReset     uint8 = spec.WatchHoldReasonsReset
	HoldLockDelay uint8 = spec.WatchHoldReasonsLockDelay

	BlockRestart  uint8 = spec.WatchBlockReasonsRestart
	BlockFailover uint8 = spec.WatchBlockReasonsFailover
)

// MaxIdentityLen is the longest holder identity an event carries; a longer
// one is cut (at a UTF-8 boundary).
const MaxIdentityLen = spec.WatchMaxIdentityLen

// MaxEventLen is the longest EVENT frame: a grant with the longest
// identity and value.
const MaxEventLen = 1 + 8 + 8 + 1 + 8 + holderFixedLen + MaxIdentityLen + MaxValueLen

// holderFixedLen is a holder's body without its identity and value:
// token, mode, limit, held_back_ms, identity_len, value_len.
const holderFixedLen = 8 + 1 + 2 + 4 + 1 + 2

// Watch is a WATCH frame: where the watcher left off (both 0 for a fresh
// watch).
type Watch struct {
	LeaseMS uint32
	Name    string
	Epoch   uint64
	Seq     uint64
}

// AppendWatch appends a WATCH to dst, validating it as the server does.
func AppendWatch(dst []byte, w Watch) ([]byte, error) {
	if err := validateAcquire(w.Name, w.LeaseMS); err != nil {
		return dst, err
	}
	dst = append(dst, MsgWatch, VersionValue)
	dst = binary.BigEndian.AppendUint32(dst, w.LeaseMS)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(w.Name)))
	dst = append(dst, w.Name...)
	dst = binary.BigEndian.AppendUint64(dst, w.Epoch)
	return binary.BigEndian.AppendUint64(dst, w.Seq), nil
}

// ReadWatchBody reads a WATCH after its type byte, with the checks in the
// server's order: version (ErrUnsupportedVersion, before anything else is
// read), lease, name length (a name too long is not read), UTF-8.
func ReadWatchBody(r io.Reader) (Watch, error) {
	var hdr [7]byte
	if _, err := io.ReadFull(r, hdr[:1]); err != nil {
		return Watch{}, err
	}
	if hdr[0] != VersionValue {
		return Watch{}, ErrUnsupportedVersion
	}
	if _, err := io.ReadFull(r, hdr[1:]); err != nil {
		return Watch{}, err
	}
	w := Watch{LeaseMS: binary.BigEndian.Uint32(hdr[1:5])}
	if err := checkLease(w.LeaseMS); err != nil {
		return w, err
	}
	nameLen := int(binary.BigEndian.Uint16(hdr[5:7]))
	if err := checkNameLen(nameLen); err != nil {
		return w, err
	}
	buf := make([]byte, nameLen+16)
	if _, err := io.ReadFull(r, buf); err != nil {
		return w, err
	}
	if !utf8.Valid(buf[:nameLen]) {
		return w, ErrNameNotUTF8
	}
	w.Name = string(buf[:nameLen])
	w.Epoch = binary.BigEndian.Uint64(buf[nameLen:])
	w.Seq = binary.BigEndian.Uint64(buf[nameLen+8:])
	return w, nil
}

// Event is one EVENT frame. Which fields a kind carries:
//
//	snapshot      Resync, Holders, Waiters, MS (blocked that long)
//	holder        Token, Mode, Limit, MS (held back that long), Identity, Value
//	waiter        Arrival, Mode, Limit, Identity, Value
//	snapshot end  —
//	granted       Arrival, and a holder's fields
//	value         Token, Value
//	ended         Token, Why (End*)
//	held back     Token, Why (Hold*), MS
//	queued        as waiter
//	left          Arrival
//	blocked       MS, Why (Block*)
type Event struct {
	Epoch, Seq uint64
	Kind       uint8

	Resync           bool
	Holders, Waiters uint32
	MS               uint32
	Token            uint64
	Arrival          uint64
	Mode             uint8
	Limit            uint16
	Identity         string
	Value            []byte
	Why              uint8
}

// AppendEvent appends e's EVENT frame to dst. An identity longer than
// MaxIdentityLen is cut; a value longer than MaxValueLen never reaches
// the server.
func AppendEvent(dst []byte, e *Event) []byte {
	dst = append(dst, MsgEvent)
	dst = binary.BigEndian.AppendUint64(dst, e.Epoch)
	dst = binary.BigEndian.AppendUint64(dst, e.Seq)
	dst = append(dst, e.Kind)
	switch e.Kind {
	case EventSnapshot:
		var flags uint8
		if e.Resync {
			flags |= spec.WatchSnapshotFlagResync
		}
		dst = append(dst, flags)
		dst = binary.BigEndian.AppendUint32(dst, e.Holders)
		dst = binary.BigEndian.AppendUint32(dst, e.Waiters)
		dst = binary.BigEndian.AppendUint32(dst, e.MS)
	case EventHolder:
		dst = appendHolder(dst, e)
	case EventGranted:
		dst = binary.BigEndian.AppendUint64(dst, e.Arrival)
		dst = appendHolder(dst, e)
	case EventWaiter, EventQueued:
		dst = binary.BigEndian.AppendUint64(dst, e.Arrival)
		dst = appendClaimant(dst, e)
	case EventValue:
		dst = binary.BigEndian.AppendUint64(dst, e.Token)
		dst = appendValue(dst, e.Value)
	case EventEnded:
		dst = binary.BigEndian.AppendUint64(dst, e.Token)
		dst = append(dst, e.Why)
	case EventHeldBack:
		dst = binary.BigEndian.AppendUint64(dst, e.Token)
		dst = append(dst, e.Why)
		dst = binary.BigEndian.AppendUint32(dst, e.MS)
	case EventLeft:
		dst = binary.BigEndian.AppendUint64(dst, e.Arrival)
	case EventBlocked:
		dst = binary.BigEndian.AppendUint32(dst, e.MS)
		dst = append(dst, e.Why)
	}
	return dst
}

// appendHolder appends a holder's body: token, mode, limit, held_back_ms,
// identity, value.
func appendHolder(dst []byte, e *Event) []byte {
	dst = binary.BigEndian.AppendUint64(dst, e.Token)
	dst = append(dst, e.Mode)
	dst = binary.BigEndian.AppendUint16(dst, e.Limit)
	dst = binary.BigEndian.AppendUint32(dst, e.MS)
	return appendWho(dst, e)
}

// appendClaimant appends a waiter's body after its arrival: mode, limit,
// identity, value.
func appendClaimant(dst []byte, e *Event) []byte {
	dst = append(dst, e.Mode)
	dst = binary.BigEndian.AppendUint16(dst, e.Limit)
	return appendWho(dst, e)
}

func appendWho(dst []byte, e *Event) []byte {
	id := truncateUTF8(e.Identity, MaxIdentityLen)
	dst = append(dst, uint8(len(id)))
	dst = append(dst, id...)
	return appendValue(dst, e.Value)
}

// ErrMalformedEvent is a server EVENT that breaks the frame's rules (an
// unknown kind, a field out of bounds).
var ErrMalformedEvent = errors.New("malformed EVENT")

// ReadEventBody reads an EVENT after its type byte.
func ReadEventBody(r io.Reader) (Event, error) {
	var hdr [17]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return Event{}, err
	}
	e := Event{Epoch: binary.BigEndian.Uint64(hdr[:8]), Seq: binary.BigEndian.Uint64(hdr[8:16]), Kind: hdr[16]}
	rd := fieldReader{r: r}
	switch e.Kind {
	case EventSnapshot:
		flags := rd.u8()
		e.Resync = flags&spec.WatchSnapshotFlagResync != 0
		e.Holders, e.Waiters, e.MS = rd.u32(), rd.u32(), rd.u32()
	case EventHolder:
		rd.holder(&e)
	case EventGranted:
		e.Arrival = rd.u64()
		rd.holder(&e)
	case EventWaiter, EventQueued:
		e.Arrival = rd.u64()
		e.Mode, e.Limit = rd.u8(), rd.u16()
		rd.who(&e)
	case EventSnapshotEnd:
	case EventValue:
		e.Token = rd.u64()
		e.Value = rd.value()
	case EventEnded:
		e.Token, e.Why = rd.u64(), rd.u8()
	case EventHeldBack:
		e.Token, e.Why, e.MS = rd.u64(), rd.u8(), rd.u32()
	case EventLeft:
		e.Arrival = rd.u64()
	case EventBlocked:
		e.MS, e.Why = rd.u32(), rd.u8()
	default:
		return e, fmt.Errorf("%w: unknown kind %d", ErrMalformedEvent, e.Kind)
	}
	return e, rd.err
}

// fieldReader reads big-endian fields until the first error, which it
// keeps: the fields after it read as zero.
type fieldReader struct {
	r   io.Reader
	err error
	buf [8]byte
}

func (f *fieldReader) read(n int) []byte {
	if f.err != nil {
		clear(f.buf[:n])
		return f.buf[:n]
	}
	_, f.err = io.ReadFull(f.r, f.buf[:n])
	return f.buf[:n]
}

func (f *fieldReader) u8() uint8   { return f.read(1)[0] }
func (f *fieldReader) u16() uint16 { return binary.BigEndian.Uint16(f.read(2)) }
func (f *fieldReader) u32() uint32 { return binary.BigEndian.Uint32(f.read(4)) }
func (f *fieldReader) u64() uint64 { return binary.BigEndian.Uint64(f.read(8)) }

func (f *fieldReader) holder(e *Event) {
	e.Token, e.Mode, e.Limit, e.MS = f.u64(), f.u8(), f.u16(), f.u32()
	f.who(e)
}

func (f *fieldReader) who(e *Event) {
	id := make([]byte, f.u8())
	if f.err == nil {
		_, f.err = io.ReadFull(f.r, id)
	}
	e.Identity = string(id)
	e.Value = f.value()
}

func (f *fieldReader) value() []byte {
	if f.err != nil {
		return nil
	}
	var v []byte
	v, f.err = readValue(f.r)
	if errors.Is(f.err, ErrValueTooLong) {
		f.err = fmt.Errorf("%w: a value over %d bytes", ErrMalformedEvent, MaxValueLen)
	}
	return v
}

// AppendWatching appends the WATCHING that answers a watcher's HEARTBEAT:
// the last event sent on the connection.
func AppendWatching(dst []byte, epoch, seq uint64) []byte {
	dst = append(dst, MsgWatching)
	dst = binary.BigEndian.AppendUint64(dst, epoch)
	return binary.BigEndian.AppendUint64(dst, seq)
}

// ReadWatchingBody reads a WATCHING after its type byte.
func ReadWatchingBody(r io.Reader) (epoch, seq uint64, err error) {
	var b [16]byte
	if _, err = io.ReadFull(r, b[:]); err != nil {
		return 0, 0, err
	}
	return binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:]), nil
}
