package protocol

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

type valueVectors struct {
	ClientValidV3 []struct {
		Desc     string `json:"desc"`
		Type     string `json:"type"`
		Name     string `json:"name"`
		LeaseMS  uint32 `json:"lease_ms"`
		Mode     uint8  `json:"mode"`
		Limit    uint16 `json:"limit"`
		Value    string `json:"value"`
		ValueHex string `json:"value_hex"`
		Hex      string `json:"hex"`
	} `json:"client_valid_v3"`
	ClientInvalidV3 []struct {
		Desc     string `json:"desc"`
		Name     string `json:"name"`
		LeaseMS  uint32 `json:"lease_ms"`
		Mode     uint8  `json:"mode"`
		Limit    uint16 `json:"limit"`
		ValueLen int    `json:"value_len"`
		Code     uint8  `json:"code"`
	} `json:"client_invalid_v3"`
	ServerInvalidV3 []struct {
		Desc          string `json:"desc"`
		Hex           string `json:"hex"`
		Code          uint8  `json:"code"`
		AfterAcquire3 bool   `json:"after_acquire_v3"`
	} `json:"server_invalid_v3"`
}

// Every version 3 frame of spec/vectors/frames.json, both ways.
func TestSpecClientValidV3Frames(t *testing.T) {
	var v valueVectors
	loadSpec(t, "vectors/frames.json", &v)
	if len(v.ClientValidV3) == 0 {
		t.Fatal("no client_valid_v3 vectors")
	}
	for _, c := range v.ClientValidV3 {
		t.Run(c.Desc, func(t *testing.T) {
			want := mustHex(t, c.Hex)
			value := []byte(c.Value)
			if c.ValueHex != "" {
				value = mustHex(t, c.ValueHex)
			}
			if c.Type == "PROCLAIM" {
				got, err := AppendProclaim(nil, value)
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("AppendProclaim = %x, %v; want %x", got, err, want)
				}
				back, err := ReadProclaimBody(iotest.OneByteReader(bytes.NewReader(want[1:])))
				if err != nil || !bytes.Equal(back, value) {
					t.Fatalf("ReadProclaimBody = %q, %v; want %q", back, err, value)
				}
				return
			}
			got, err := AppendAcquireV3(nil, c.Name, c.LeaseMS, c.Mode, c.Limit, value)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("AppendAcquireV3 = %x, %v; want %x", got, err, want)
			}
			a, err := ReadAcquire(iotest.OneByteReader(bytes.NewReader(want[1:])))
			wantA := Acquire{Version: VersionValue, LeaseMS: c.LeaseMS, Mode: c.Mode, Limit: c.Limit, Name: c.Name, Value: value}
			if err != nil || !reflect.DeepEqual(a, wantA) {
				t.Fatalf("ReadAcquire = %+v, %v; want %+v", a, err, wantA)
			}
		})
	}
}

// Refused before sending, with the code, and nothing written.
func TestSpecClientInvalidV3Inputs(t *testing.T) {
	var v valueVectors
	loadSpec(t, "vectors/frames.json", &v)
	if len(v.ClientInvalidV3) == 0 {
		t.Fatal("no client_invalid_v3 vectors")
	}
	for _, c := range v.ClientInvalidV3 {
		dst := []byte{0xee}
		got, err := AppendAcquireV3(dst, c.Name, c.LeaseMS, c.Mode, c.Limit, []byte(strings.Repeat("v", c.ValueLen)))
		if !errors.Is(err, CodeErr(c.Code)) || !bytes.Equal(got, dst) {
			t.Errorf("%s: AppendAcquireV3 = %x, %v; want code %#x and nothing written", c.Desc, got, err, c.Code)
		}
	}
	if _, err := AppendProclaim(nil, make([]byte, MaxValueLen+1)); !errors.Is(err, ErrValueTooLong) {
		t.Errorf("AppendProclaim of %d bytes = %v", MaxValueLen+1, err)
	}
}

// The server refuses a value too long at its length: the value is never
// read (the vectors end there).
func TestSpecServerInvalidV3Bodies(t *testing.T) {
	var v valueVectors
	loadSpec(t, "vectors/frames.json", &v)
	if len(v.ServerInvalidV3) == 0 {
		t.Fatal("no server_invalid_v3 vectors")
	}
	for _, c := range v.ServerInvalidV3 {
		frame := mustHex(t, c.Hex)
		var err error
		if c.AfterAcquire3 {
			_, err = ReadProclaimBody(bytes.NewReader(frame[1:]))
		} else {
			_, err = ReadAcquire(bytes.NewReader(frame[1:]))
		}
		if !errors.Is(err, CodeErr(c.Code)) {
			t.Errorf("%s: %v, want code %#x", c.Desc, err, c.Code)
		}
	}
}
