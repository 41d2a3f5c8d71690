package protocol

// These tests load the language-neutral contract in spec/ and prove that this
// package agrees with every vector in it. Other languages run the same files
// through their own codecs, so a disagreement shows up here first.

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"testing"
	"testing/iotest"

	"github.com/monolock/monolock/go/internal/testspec"
)

func loadSpec(t *testing.T, rel string, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(testspec.Read(t, rel)))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode %s: %v", rel, err)
	}
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

type frameVectors struct {
	ClientValid []struct {
		Desc    string `json:"desc"`
		Type    string `json:"type"`
		Name    string `json:"name"`
		LeaseMS uint32 `json:"lease_ms"`
		Hex     string `json:"hex"`
	} `json:"client_valid"`
	ServerValid []struct {
		Desc   string `json:"desc"`
		Type   string `json:"type"`
		Token  string `json:"token"`
		Code   uint8  `json:"code"`
		Reason string `json:"reason"`
		Hex    string `json:"hex"`
	} `json:"server_valid"`
	ClientInvalid []struct {
		Desc    string      `json:"desc"`
		NameHex string      `json:"name_hex"`
		LeaseMS json.Number `json:"lease_ms"`
		Code    uint8       `json:"code"`
	} `json:"client_invalid"`
	ServerErrorCut []struct {
		Desc   string `json:"desc"`
		Hex    string `json:"hex"`
		Code   *uint8 `json:"code"`
		Reason string `json:"reason"`
	} `json:"server_error_cut"`
}

func TestSpecClientValidFrames(t *testing.T) {
	var v frameVectors
	loadSpec(t, "vectors/frames.json", &v)
	if len(v.ClientValid) == 0 {
		t.Fatal("no client_valid vectors")
	}
	for _, c := range v.ClientValid {
		t.Run(c.Desc, func(t *testing.T) {
			want := mustHex(t, c.Hex)
			switch c.Type {
			case "ACQUIRE":
				got, err := AppendAcquire(nil, c.Name, c.LeaseMS)
				if err != nil {
					t.Fatalf("AppendAcquire: %v", err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("AppendAcquire = %x, want %x", got, want)
				}
				// The server side must read back what the client wrote, also
				// when the stream delivers one byte per read.
				if want[0] != MsgAcquire {
					t.Fatalf("vector does not start with ACQUIRE: %x", want)
				}
				ver, lease, name, err := ReadAcquireBody(iotest.OneByteReader(bytes.NewReader(want[1:])))
				if err != nil || ver != Version || lease != c.LeaseMS || name != c.Name {
					t.Fatalf("ReadAcquireBody = %d, %d, %q, %v", ver, lease, name, err)
				}
			case "HEARTBEAT":
				if !bytes.Equal(want, []byte{MsgHeartbeat}) {
					t.Fatalf("heartbeat vector %x, package sends %x", want, MsgHeartbeat)
				}
			default:
				t.Fatalf("unknown client frame type %q", c.Type)
			}
		})
	}
}

func TestSpecServerValidFrames(t *testing.T) {
	var v frameVectors
	loadSpec(t, "vectors/frames.json", &v)
	if len(v.ServerValid) == 0 {
		t.Fatal("no server_valid vectors")
	}
	for _, c := range v.ServerValid {
		t.Run(c.Desc, func(t *testing.T) {
			want := mustHex(t, c.Hex)
			// Decode through a one-byte reader: frames arrive split in practice.
			body := iotest.OneByteReader(bytes.NewReader(want[1:]))
			switch c.Type {
			case "WAITING":
				if !bytes.Equal(want, []byte{MsgWaiting}) {
					t.Fatalf("waiting vector %x, package uses %x", want, MsgWaiting)
				}
			case "ACQUIRED":
				if want[0] != MsgAcquired {
					t.Fatalf("type byte %x, want %x", want[0], MsgAcquired)
				}
				token, err := strconv.ParseUint(c.Token, 10, 64)
				if err != nil {
					t.Fatalf("vector token %q: %v", c.Token, err)
				}
				got, err := ReadAcquiredBody(body)
				if err != nil || got != token {
					t.Fatalf("ReadAcquiredBody = %d, %v; want %d", got, err, token)
				}
				if enc := AppendAcquired(nil, token); !bytes.Equal(enc, want) {
					t.Fatalf("AppendAcquired = %x, want %x", enc, want)
				}
			case "ERROR":
				if want[0] != MsgError {
					t.Fatalf("type byte %x, want %x", want[0], MsgError)
				}
				code, reason, err := ReadErrorBody(body)
				if err != nil || code != c.Code || reason != c.Reason {
					t.Fatalf("ReadErrorBody = %#x, %q, %v; want %#x, %q", code, reason, err, c.Code, c.Reason)
				}
				if enc := AppendError(nil, c.Code, c.Reason); !bytes.Equal(enc, want) {
					t.Fatalf("AppendError = %x, want %x", enc, want)
				}
			default:
				t.Fatalf("unknown server frame type %q", c.Type)
			}
		})
	}
}

func TestSpecClientInvalidInputs(t *testing.T) {
	var v frameVectors
	loadSpec(t, "vectors/frames.json", &v)
	if len(v.ClientInvalid) == 0 {
		t.Fatal("no client_invalid vectors")
	}
	for _, c := range v.ClientInvalid {
		t.Run(c.Desc, func(t *testing.T) {
			name := string(mustHex(t, c.NameHex))
			lease, err := strconv.ParseUint(c.LeaseMS.String(), 10, 64)
			if err != nil {
				t.Fatalf("vector lease %q: %v", c.LeaseMS, err)
			}
			if lease > math.MaxUint32 {
				// AppendAcquire takes a uint32, so a lease above 2^32-1 cannot
				// even be expressed in its signature: the Go type system is the
				// check here. Clients in languages without a uint32 must test
				// this vector themselves (0x17 before any byte is sent).
				if c.Code != ErrInvalidLease.Code {
					t.Fatalf("lease above uint32 must be 0x17, vector says %#x", c.Code)
				}
				return
			}
			dst := []byte{0xee}
			got, err := AppendAcquire(dst, name, uint32(lease))
			var pe *Error
			if !errors.As(err, &pe) || pe.Code != c.Code {
				t.Fatalf("AppendAcquire error = %v, want code %#x", err, c.Code)
			}
			if pe != CodeErr(c.Code) {
				t.Fatalf("error is not the canonical value for %#x", c.Code)
			}
			if !bytes.Equal(got, dst) {
				t.Fatalf("AppendAcquire wrote %x on invalid input", got[1:])
			}
		})
	}
}

type errorTable struct {
	FirstTerminalCode uint8 `json:"first_terminal_code"`
	Errors            []struct {
		Code      uint8  `json:"code"`
		Name      string `json:"name"`
		Text      string `json:"text"`
		Temporary bool   `json:"temporary"`
	} `json:"errors"`
	UnknownCodeExamples []struct {
		Code      uint8 `json:"code"`
		Temporary bool  `json:"temporary"`
	} `json:"unknown_code_examples"`
}

// The variables and the table of errors_gen.go are generated from
// spec/errors.json (a stale file fails go run mage.go test:gen); this test
// checks what generation does not: the lookup by code, the texts that
// CodeErr and ErrCodeName hand out, and the range rule of Temporary.
func TestSpecErrorTable(t *testing.T) {
	var tab errorTable
	loadSpec(t, "errors.json", &tab)
	if tab.FirstTerminalCode != firstTerminalCode {
		t.Fatalf("first_terminal_code %#x, package uses %#x", tab.FirstTerminalCode, firstTerminalCode)
	}
	if len(tab.Errors) != len(errorsByCode) {
		t.Fatalf("spec lists %d codes, package knows %d", len(tab.Errors), len(errorsByCode))
	}
	for _, e := range tab.Errors {
		t.Run(e.Name, func(t *testing.T) {
			got := CodeErr(e.Code)
			if got == nil {
				t.Fatalf("CodeErr(%#x) = nil", e.Code)
			}
			if got.Code != e.Code || got.text != e.Text || ErrCodeName(e.Code) != e.Text {
				t.Fatalf("code %#x text %q, spec says %#x %q", got.Code, got.text, e.Code, e.Text)
			}
			if got.Temporary() != e.Temporary {
				t.Fatalf("Temporary() = %v, spec says %v", got.Temporary(), e.Temporary)
			}
		})
	}
	for _, u := range tab.UnknownCodeExamples {
		if CodeErr(u.Code) != nil {
			t.Fatalf("example %#x is meant to be unknown but CodeErr knows it", u.Code)
		}
		// A client classifies an unknown code by range, exactly like a known one.
		if (&Error{Code: u.Code}).Temporary() != u.Temporary {
			t.Fatalf("unknown code %#x: Temporary() disagrees with spec (%v)", u.Code, u.Temporary)
		}
	}
}

func TestSpecConstants(t *testing.T) {
	var c struct {
		MessageTypes map[string]uint8 `json:"message_types"`
		LeaseMS      struct {
			Min uint64 `json:"min"`
			Max uint64 `json:"max"`
		} `json:"lease_ms"`
	}
	loadSpec(t, "constants.json", &c)
	want := map[string]uint8{
		"ACQUIRE": MsgAcquire, "HEARTBEAT": MsgHeartbeat,
		"WAITING": MsgWaiting, "ACQUIRED": MsgAcquired, "ERROR": MsgError,
	}
	if len(c.MessageTypes) != len(want) {
		t.Fatalf("message_types %v, package has %v", c.MessageTypes, want)
	}
	for name, v := range want {
		if c.MessageTypes[name] != v || MsgName(v) != name {
			t.Fatalf("message type %s: spec %#x, package %#x (%s)", name, c.MessageTypes[name], v, MsgName(v))
		}
	}
	if c.LeaseMS.Min != 1 || c.LeaseMS.Max != math.MaxUint32 {
		t.Fatalf("lease range %+v, package accepts 1..%d", c.LeaseMS, uint32(math.MaxUint32))
	}
}

// Every server frame, whole or one byte per read, comes out of the Decoder
// as the vector says; an ERROR cut short comes out with what had arrived.
func TestSpecDecoder(t *testing.T) {
	var v frameVectors
	loadSpec(t, "vectors/frames.json", &v)
	if len(v.ServerErrorCut) == 0 {
		t.Fatal("no server_error_cut vectors")
	}
	for _, c := range v.ServerValid {
		stream := mustHex(t, c.Hex)
		for _, size := range []int{1, len(stream)} {
			if c.Type == "ERROR" && size == 1 {
				continue // an ERROR ends at the end of each read: the cut vectors below
			}
			got := decodeChunks(t, stream, size)
			if len(got) != 1 || MsgName(got[0].Type) != c.Type {
				t.Fatalf("%s: decoded %+v from reads of %d", c.Desc, got, size)
			}
			f := got[0]
			token, _ := strconv.ParseUint(c.Token, 10, 64)
			if (c.Type == "ACQUIRED" && f.Token != token) || (c.Type == "ERROR" && (f.Code != c.Code || !f.Coded || f.Reason != c.Reason)) {
				t.Fatalf("%s: decoded %+v", c.Desc, f)
			}
		}
	}
	for _, c := range v.ServerErrorCut {
		var d Decoder
		f, _, ok, err := d.Next(mustHex(t, c.Hex))
		if err != nil || !ok || f.Type != MsgError || f.Coded != (c.Code != nil) || f.Reason != c.Reason || (c.Code != nil && f.Code != *c.Code) {
			t.Fatalf("%s: decoded %+v, %v, %v", c.Desc, f, ok, err)
		}
	}
}
