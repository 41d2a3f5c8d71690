package protocol

// Protocol version 3: a value per claim.
//
//	ACQUIRE v3 [0x01][0x03][lease_ms uint32][mode uint8][limit uint16][name_len uint16][name bytes][value_len uint16][value bytes]
//	PROCLAIM   [0x03][value_len uint16][value bytes]
//
// A value says who holds the lock and how to reach it (an address, a URL,
// a small JSON object); PROCLAIM replaces it while the claim waits or
// holds, and is answered as a HEARTBEAT is. Clients send version 3 only
// for a claim with a value. docs/protocol.md has the whole design.

import (
	"encoding/binary"
	"io"

	"github.com/monolock/monolock/go/internal/spec"
)

// VersionValue is the protocol version of claims with a value.
const VersionValue uint8 = spec.ValueProtocolVersion

// MaxValueLen is the longest value, in bytes.
const MaxValueLen = spec.ValueMaxValueLen

// MsgProclaim replaces the value of the claim on its connection.
const MsgProclaim uint8 = spec.ValueProclaimType

// AppendAcquireV3 appends a version 3 ACQUIRE to dst: a claim with value.
// A claim without a value should be sent as version 1 or 2, which every
// server of those versions reads.
func AppendAcquireV3(dst []byte, name string, leaseMS uint32, mode uint8, limit uint16, value []byte) ([]byte, error) {
	if err := validateAcquireV2(name, leaseMS, mode, limit); err != nil {
		return dst, err
	}
	if err := checkValueLen(len(value)); err != nil {
		return dst, err
	}
	return appendValue(appendAcquireModed(dst, VersionValue, name, leaseMS, mode, limit), value), nil
}

// AppendProclaim appends a PROCLAIM of value to dst.
func AppendProclaim(dst []byte, value []byte) ([]byte, error) {
	if err := checkValueLen(len(value)); err != nil {
		return dst, err
	}
	return appendValue(append(dst, MsgProclaim), value), nil
}

// ReadProclaimBody reads a PROCLAIM after its type byte: the new value. A
// length over MaxValueLen fails with ErrValueTooLong before the value is
// read.
func ReadProclaimBody(r io.Reader) ([]byte, error) { return readValue(r) }

func appendValue(dst, value []byte) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(value)))
	return append(dst, value...)
}

// readValue reads value_len and the value; a value too long is not read.
func readValue(r io.Reader) ([]byte, error) {
	var n [2]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	length := int(binary.BigEndian.Uint16(n[:]))
	if err := checkValueLen(length); err != nil {
		return nil, err
	}
	if length == 0 {
		return nil, nil
	}
	value := make([]byte, length)
	if _, err := io.ReadFull(r, value); err != nil {
		return nil, err
	}
	return value, nil
}

func checkValueLen(n int) error {
	if n > MaxValueLen {
		return ErrValueTooLong
	}
	return nil
}
