package protocol

// Protocol version 4: sessions, many claims and watches on one connection.
//
// Client -> server:
//
//	SESSION    [0x05][0x04][lease_ms uint32]        the connection's first frame
//	OPEN       [0x06][stream uint32][ACQUIRE v1-3 or WATCH, type byte included]
//	ON         [0x07][stream uint32][PROCLAIM, type byte included]
//	RELEASE    [0x08][stream uint32]
//	HEARTBEAT  [0x02]                               renews every stream
//
// Server -> client:
//
//	SESSION_OK [0x16][max_streams uint32]
//	STREAM     [0x17][stream uint32][WAITING, ACQUIRED, EVENT or WATCHING]
//	RELEASED   [0x18][stream uint32]
//	STREAM_END [0x19][stream uint32][code uint8][reason_len uint8][reason bytes]
//	ALIVE      [0x1a]                               answers HEARTBEAT
//	ERROR      [0x13]...                            ends the whole session
//
// Every stream shares the session's lease. docs/protocol.md has the rules.

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/monolock/monolock/go/internal/spec"
)

// VersionSession is the protocol version of SESSION.
const VersionSession uint8 = spec.SessionProtocolVersion

// The session's message types.
const (
	MsgSession   uint8 = spec.SessionSessionType
	MsgOpen      uint8 = spec.SessionOpenType
	MsgOn        uint8 = spec.SessionOnType
	MsgRelease   uint8 = spec.SessionReleaseType
	MsgSessionOK uint8 = spec.SessionSessionOkType
	MsgStream    uint8 = spec.SessionStreamType
	MsgReleased  uint8 = spec.SessionReleasedType
	MsgStreamEnd uint8 = spec.SessionStreamEndType
	MsgAlive     uint8 = spec.SessionAliveType
)

// DefaultMaxStreams is how many streams a session may have open at once
// unless the server is told otherwise.
const DefaultMaxStreams = spec.SessionMaxStreamsDefault

// AppendSession appends a SESSION frame with the session's lease.
func AppendSession(dst []byte, leaseMS uint32) ([]byte, error) {
	if err := checkLease(leaseMS); err != nil {
		return dst, err
	}
	dst = append(dst, MsgSession, VersionSession)
	return binary.BigEndian.AppendUint32(dst, leaseMS), nil
}

// ReadSessionBody reads a SESSION after its type byte: the version
// (ErrUnsupportedVersion before anything else is read), then the lease.
func ReadSessionBody(r io.Reader) (leaseMS uint32, err error) {
	var b [5]byte
	if _, err := io.ReadFull(r, b[:1]); err != nil {
		return 0, err
	}
	if b[0] != VersionSession {
		return 0, ErrUnsupportedVersion
	}
	if _, err := io.ReadFull(r, b[1:]); err != nil {
		return 0, err
	}
	leaseMS = binary.BigEndian.Uint32(b[1:])
	return leaseMS, checkLease(leaseMS)
}

// AppendStreamHeader appends the type byte and the stream id that start
// an OPEN, ON, RELEASE, STREAM, RELEASED or STREAM_END; the caller appends
// what follows (the inner frame, or for STREAM_END the code and reason).
func AppendStreamHeader(dst []byte, typ uint8, stream uint32) []byte {
	return binary.BigEndian.AppendUint32(append(dst, typ), stream)
}

// AppendStreamEnd appends a STREAM_END for stream with code and reason (cut
// to 255 bytes at a UTF-8 boundary, as an ERROR's).
func AppendStreamEnd(dst []byte, stream uint32, code uint8, reason string) []byte {
	reason = truncateUTF8(reason, maxReasonLen)
	dst = AppendStreamHeader(dst, MsgStreamEnd, stream)
	dst = append(dst, code, uint8(len(reason)))
	return append(dst, reason...)
}

// AppendSessionOK appends a SESSION_OK with the server's cap of streams.
func AppendSessionOK(dst []byte, maxStreams uint32) []byte {
	return binary.BigEndian.AppendUint32(append(dst, MsgSessionOK), maxStreams)
}

// ReadStreamID reads the stream id that follows a session frame's type byte.
func ReadStreamID(r io.Reader) (uint32, error) {
	var b [4]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint32(b[:]), nil
}

// SessionFrame is one frame a server sends on a session, as
// ReadSessionFrame returns it.
type SessionFrame struct {
	Type   uint8  // MsgSessionOK, MsgStream, MsgReleased, MsgStreamEnd, MsgAlive or MsgError
	Stream uint32 // STREAM, RELEASED, STREAM_END
	// MaxStreams is SESSION_OK's cap of streams.
	MaxStreams uint32
	// Inner is STREAM's frame type: MsgWaiting, MsgAcquired, MsgEvent or
	// MsgWatching, with Token (ACQUIRED), Event (EVENT) or Epoch and Seq
	// (WATCHING).
	Inner      uint8
	Token      uint64
	Event      Event
	Epoch, Seq uint64
	// Code and Reason are STREAM_END's and ERROR's.
	Code   uint8
	Reason string
}

// ReadSessionFrame reads one whole server frame of a session from r (a
// buffered reader: it reads field by field). An ERROR is read whole too;
// a reader that must act on its type byte alone peeks it first.
func ReadSessionFrame(r io.Reader) (SessionFrame, error) {
	var t [1]byte
	if _, err := io.ReadFull(r, t[:]); err != nil {
		return SessionFrame{}, err
	}
	f := SessionFrame{Type: t[0]}
	var err error
	switch f.Type {
	case MsgAlive:
	case MsgSessionOK:
		f.MaxStreams, err = ReadStreamID(r) // a u32 as well
	case MsgReleased:
		f.Stream, err = ReadStreamID(r)
	case MsgStreamEnd:
		if f.Stream, err = ReadStreamID(r); err == nil {
			f.Code, f.Reason, err = ReadErrorBody(r)
		}
	case MsgError:
		f.Code, f.Reason, err = ReadErrorBody(r)
	case MsgStream:
		if f.Stream, err = ReadStreamID(r); err == nil {
			err = readStreamInner(r, &f)
		}
	default:
		return f, fmt.Errorf("unknown session message type 0x%02x", f.Type)
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF // the type byte came: the frame was cut
	}
	return f, err
}

// readStreamInner reads the server frame a STREAM carries.
func readStreamInner(r io.Reader, f *SessionFrame) error {
	var t [1]byte
	if _, err := io.ReadFull(r, t[:]); err != nil {
		return err
	}
	f.Inner = t[0]
	var err error
	switch f.Inner {
	case MsgWaiting:
	case MsgAcquired:
		f.Token, err = ReadAcquiredBody(r)
	case MsgEvent:
		f.Event, err = ReadEventBody(r)
	case MsgWatching:
		f.Epoch, f.Seq, err = ReadWatchingBody(r)
	default:
		return fmt.Errorf("unknown frame type 0x%02x in a STREAM", f.Inner)
	}
	return err
}
