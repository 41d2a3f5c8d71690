package protocol

// Protocol version 2: shared claims and semaphores.
//
//	ACQUIRE v2 [0x01][0x02][lease_ms uint32][mode uint8][limit uint16][name_len uint16][name bytes]
//
// Every other message, and everything a session does after its ACQUIRE, is
// as in version 1. A version 1 ACQUIRE is an exclusive claim, so clients
// send version 1 for exclusive claims (which keeps them working against a
// version 1 server) and version 2 only for shared ones. The functions of
// version 1 above stay exactly as they were; ReadAcquire reads both.

import (
	"encoding/binary"
	"io"
	"unicode/utf8"

	"github.com/monolock/monolock/go/internal/spec"
)

// VersionShared is the protocol version of shared claims.
const VersionShared uint8 = spec.SharedProtocolVersion

// Modes of a version 2 ACQUIRE.
const (
	// ModeExclusive holds the lock alone, as every version 1 claim does.
	ModeExclusive uint8 = spec.SharedModeExclusive
	// ModeShared holds it beside other shared claims, none exclusive, and
	// at most limit of them at once when limit is not 0.
	ModeShared uint8 = spec.SharedModeShared
)

// acquireV2HeaderLen is the version 2 body before the name: version,
// lease_ms, mode, limit, name_len.
const acquireV2HeaderLen = 1 + 4 + 1 + 2 + 2

// Acquire is an ACQUIRE of any version. A version 1 ACQUIRE reads as
// Mode ModeExclusive and Limit 0; only a version 3 one has a Value.
type Acquire struct {
	Version uint8
	LeaseMS uint32
	Mode    uint8
	Limit   uint16
	Name    string
	Value   []byte
}

// Shared reports whether a is a shared claim.
func (a Acquire) Shared() bool { return a.Mode == ModeShared }

// AppendAcquireV2 appends a version 2 ACQUIRE to dst. Exclusive claims
// should be sent with AppendAcquire instead, which every server reads.
func AppendAcquireV2(dst []byte, name string, leaseMS uint32, mode uint8, limit uint16) ([]byte, error) {
	if err := validateAcquireV2(name, leaseMS, mode, limit); err != nil {
		return dst, err
	}
	return appendAcquireModed(dst, VersionShared, name, leaseMS, mode, limit), nil
}

// appendAcquireModed appends an ACQUIRE of version 2 or 3 up to the end
// of its name: the layout they share.
func appendAcquireModed(dst []byte, version uint8, name string, leaseMS uint32, mode uint8, limit uint16) []byte {
	dst = append(dst, MsgAcquire, version)
	dst = binary.BigEndian.AppendUint32(dst, leaseMS)
	dst = append(dst, mode)
	dst = binary.BigEndian.AppendUint16(dst, limit)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(name)))
	return append(dst, name...)
}

// validateAcquireV2 applies the server's checks of a version 2 ACQUIRE in
// the server's order: the lease, the mode and limit, then the name.
func validateAcquireV2(name string, leaseMS uint32, mode uint8, limit uint16) error {
	if err := checkLease(leaseMS); err != nil {
		return err
	}
	if err := validateMode(mode, limit); err != nil {
		return err
	}
	return checkName(name)
}

// validateMode refuses a mode other than exclusive and shared, and an
// exclusive claim with a limit.
func validateMode(mode uint8, limit uint16) error {
	switch {
	case mode == ModeShared:
		return nil
	case mode == ModeExclusive && limit == 0:
		return nil
	}
	return ErrInvalidMode
}

// ReadAcquire reads an ACQUIRE body of version 1, 2 or 3, i.e. everything
// after the type byte, which the caller has already consumed. It checks
// what ReadAcquireBody checks, in the same order, with the mode and limit
// checked after the lease and before the name, and a version 3 value's
// length after the name. Another version fails with ErrUnsupportedVersion
// before anything after the version byte is read.
func ReadAcquire(r io.Reader) (Acquire, error) {
	return readAcquire(r, func(v uint8) bool { return v == Version || v == VersionShared || v == VersionValue })
}

// readAcquire reads an ACQUIRE body of a version that accept takes, with
// the checks in the server's order; another version fails with
// ErrUnsupportedVersion before anything after the version byte is read.
func readAcquire(r io.Reader, accept func(version uint8) bool) (Acquire, error) {
	var hdr [acquireV2HeaderLen]byte
	if _, err := io.ReadFull(r, hdr[:1]); err != nil {
		return Acquire{}, err
	}
	a := Acquire{Version: hdr[0]}
	if !accept(a.Version) {
		return a, ErrUnsupportedVersion // the rest may have another layout
	}
	var nameLen int
	switch a.Version {
	case Version:
		if _, err := io.ReadFull(r, hdr[1:acquireHeaderLen]); err != nil {
			return a, err
		}
		a.LeaseMS = binary.BigEndian.Uint32(hdr[1:5])
		nameLen = int(binary.BigEndian.Uint16(hdr[5:7]))
		if err := checkLease(a.LeaseMS); err != nil {
			return a, err
		}
	case VersionShared, VersionValue:
		if _, err := io.ReadFull(r, hdr[1:]); err != nil {
			return a, err
		}
		a.LeaseMS = binary.BigEndian.Uint32(hdr[1:5])
		a.Mode = hdr[5]
		a.Limit = binary.BigEndian.Uint16(hdr[6:8])
		nameLen = int(binary.BigEndian.Uint16(hdr[8:10]))
		if err := checkLease(a.LeaseMS); err != nil {
			return a, err
		}
		if err := validateMode(a.Mode, a.Limit); err != nil {
			return a, err
		}
	default:
		return a, ErrUnsupportedVersion
	}
	// The length before the name: a name too long is not read at all.
	if err := checkNameLen(nameLen); err != nil {
		return a, err
	}
	buf := make([]byte, nameLen)
	if _, err := io.ReadFull(r, buf); err != nil {
		return a, err
	}
	if !utf8.Valid(buf) {
		return a, ErrNameNotUTF8
	}
	a.Name = string(buf)
	if a.Version == VersionValue {
		value, err := readValue(r)
		if err != nil {
			return a, err
		}
		a.Value = value
	}
	return a, nil
}
