// Package protocol implements the monolock binary wire format.
//
// All multi-byte integers are big endian. TCP is a byte stream, so every
// fixed size field is read with io.ReadFull. A client that reads without
// blocking feeds what it reads to a Decoder instead, which reassembles the
// server's messages however the stream was cut.
//
// Client -> server:
//
//	ACQUIRE   [0x01][version uint8][lease_ms uint32][name_len uint16][name bytes]
//	HEARTBEAT [0x02]
//
// Server -> client:
//
//	WAITING   [0x11]
//	ACQUIRED  [0x12][token uint64]
//	ERROR     [0x13][code uint8][reason_len uint8][reason bytes]
//
// The lease is chosen by the client: a session that stays quiet for lease_ms
// is dropped by the server. It must be positive and stays constant for the
// lifetime of the connection.
//
// The token is a fencing token: it grows monotonically with every grant of
// any lock, so the resource a lock guards can reject writes carrying a token
// smaller than one it has already seen. Every ACQUIRED of a session carries
// the same token the session was granted.
package protocol

import (
	"encoding/binary"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/monolock/monolock/go/internal/spec"
)

// Client -> server message types.
const (
	MsgAcquire   uint8 = spec.MessageTypesAcquire
	MsgHeartbeat uint8 = spec.MessageTypesHeartbeat
)

// Server -> client message types.
const (
	MsgWaiting  uint8 = spec.MessageTypesWaiting
	MsgAcquired uint8 = spec.MessageTypesAcquired
	MsgError    uint8 = spec.MessageTypesError
)

// MaxNameLen is the largest accepted lock name, in bytes. It is a protocol
// constant rather than a knob: client and server enforce the same value, so a
// name a client can build is a name the server will accept. The wire format
// carries a uint16 length and can express more, which the server rejects.
const MaxNameLen = spec.MaxNameLen

// Version is the protocol version implemented here.
const Version uint8 = spec.ProtocolVersion

// Frame sizes that callers reading from a stream need to know.
const (
	acquireHeaderLen = 1 + 4 + 2 // version, lease_ms, name_len: the body before the name
	maxReasonLen     = spec.MaxReasonLen
)

// MsgName returns a human readable name for a message type.
func MsgName(t uint8) string {
	switch t {
	case MsgAcquire:
		return "ACQUIRE"
	case MsgHeartbeat:
		return "HEARTBEAT"
	case MsgWaiting:
		return "WAITING"
	case MsgAcquired:
		return "ACQUIRED"
	case MsgError:
		return "ERROR"
	case MsgProclaim:
		return "PROCLAIM"
	case MsgWatch:
		return "WATCH"
	case MsgEvent:
		return "EVENT"
	case MsgWatching:
		return "WATCHING"
	case MsgSession:
		return "SESSION"
	case MsgOpen:
		return "OPEN"
	case MsgOn:
		return "ON"
	case MsgRelease:
		return "RELEASE"
	case MsgSessionOK:
		return "SESSION_OK"
	case MsgStream:
		return "STREAM"
	case MsgReleased:
		return "RELEASED"
	case MsgStreamEnd:
		return "STREAM_END"
	case MsgAlive:
		return "ALIVE"
	}
	return fmt.Sprintf("UNKNOWN(0x%02x)", t)
}

// AppendAcquire appends an ACQUIRE message for name with the given lease to dst.
func AppendAcquire(dst []byte, name string, leaseMS uint32) ([]byte, error) {
	if err := validateAcquire(name, leaseMS); err != nil {
		return dst, err
	}
	dst = append(dst, MsgAcquire, Version)
	dst = binary.BigEndian.AppendUint32(dst, leaseMS)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(name)))
	return append(dst, name...), nil
}

// validateAcquire applies the server's ACQUIRE checks in the server's order,
// so a client refuses exactly what the server would refuse, with the same code.
func validateAcquire(name string, leaseMS uint32) error {
	if err := checkLease(leaseMS); err != nil {
		return err
	}
	return checkName(name)
}

// The checks of an ACQUIRE, one function each, in the order the server
// applies them (docs/protocol.md): the lease, then (version 2) the mode and
// limit, then the name's length, which a reader checks before it reads the
// name, then its UTF-8. Every writer and reader of the frame uses these.

func checkLease(leaseMS uint32) error {
	if leaseMS == 0 {
		return ErrInvalidLease
	}
	return nil
}

func checkNameLen(n int) error {
	switch {
	case n == 0:
		return ErrEmptyName
	case n > MaxNameLen:
		return ErrNameTooLong
	}
	return nil
}

func checkName(name string) error {
	if err := checkNameLen(len(name)); err != nil {
		return err
	}
	if !utf8.ValidString(name) {
		return ErrNameNotUTF8
	}
	return nil
}

// AppendAcquired appends an ACQUIRED message carrying the fencing token.
func AppendAcquired(dst []byte, token uint64) []byte {
	dst = append(dst, MsgAcquired)
	return binary.BigEndian.AppendUint64(dst, token)
}

// AppendError appends an ERROR message with the given code and reason. The
// reason is for humans: clients branch on the code alone. A reason longer
// than 255 bytes is truncated to fit the length field.
func AppendError(dst []byte, code uint8, reason string) []byte {
	reason = truncateUTF8(reason, maxReasonLen)
	dst = append(dst, MsgError, code, uint8(len(reason)))
	return append(dst, reason...)
}

// truncateUTF8 cuts s to at most n bytes without splitting a UTF-8 sequence.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	// Step back over continuation bytes to the start of the cut character.
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// ReadAcquireBody reads an ACQUIRE message body, i.e. everything after the
// type byte, which the caller has already consumed.
//
// A name longer than MaxNameLen fails without reading the name itself; the
// caller is expected to answer with ERROR and close the connection, so the
// stream is not resynchronised.
func ReadAcquireBody(r io.Reader) (version uint8, leaseMS uint32, name string, err error) {
	a, err := readAcquire(r, func(v uint8) bool { return v == Version })
	return a.Version, a.LeaseMS, a.Name, err
}

// ReadAcquiredBody reads an ACQUIRED message body, i.e. everything after the
// type byte, which the caller has already consumed.
func ReadAcquiredBody(r io.Reader) (token uint64, err error) {
	var b [8]byte
	if _, err = io.ReadFull(r, b[:]); err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint64(b[:]), nil
}

// ReadErrorBody reads an ERROR message body, i.e. everything after the type
// byte, which the caller has already consumed.
func ReadErrorBody(r io.Reader) (code uint8, reason string, err error) {
	var hdr [2]byte
	if _, err = io.ReadFull(r, hdr[:]); err != nil {
		return 0, "", err
	}
	buf := make([]byte, hdr[1])
	if _, err = io.ReadFull(r, buf); err != nil {
		return hdr[0], "", err
	}
	return hdr[0], string(buf), nil
}
