package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
	"testing/iotest"
	"unicode/utf8"
)

type sharedVectors struct {
	ClientValidV2 []struct {
		Desc    string `json:"desc"`
		Name    string `json:"name"`
		LeaseMS uint32 `json:"lease_ms"`
		Mode    uint8  `json:"mode"`
		Limit   uint16 `json:"limit"`
		Hex     string `json:"hex"`
	} `json:"client_valid_v2"`
	ClientInvalidV2 []struct {
		Desc    string  `json:"desc"`
		Name    *string `json:"name"`
		NameHex string  `json:"name_hex"`
		LeaseMS uint32  `json:"lease_ms"`
		Mode    uint8   `json:"mode"`
		Limit   uint16  `json:"limit"`
		Code    uint8   `json:"code"`
	} `json:"client_invalid_v2"`
}

func TestSpecClientValidV2Frames(t *testing.T) {
	var v sharedVectors
	loadSpec(t, "vectors/frames.json", &v)
	if len(v.ClientValidV2) == 0 {
		t.Fatal("no client_valid_v2 vectors")
	}
	for _, c := range v.ClientValidV2 {
		t.Run(c.Desc, func(t *testing.T) {
			want := mustHex(t, c.Hex)
			got, err := AppendAcquireV2(nil, c.Name, c.LeaseMS, c.Mode, c.Limit)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("AppendAcquireV2 = %x, %v; want %x", got, err, want)
			}
			a, err := ReadAcquire(iotest.OneByteReader(bytes.NewReader(want[1:])))
			wantA := Acquire{Version: VersionShared, LeaseMS: c.LeaseMS, Mode: c.Mode, Limit: c.Limit, Name: c.Name}
			if err != nil || !reflect.DeepEqual(a, wantA) {
				t.Fatalf("ReadAcquire = %+v, %v; want %+v", a, err, wantA)
			}
		})
	}
}

func TestSpecClientInvalidV2Inputs(t *testing.T) {
	var v sharedVectors
	loadSpec(t, "vectors/frames.json", &v)
	if len(v.ClientInvalidV2) == 0 {
		t.Fatal("no client_invalid_v2 vectors")
	}
	for _, c := range v.ClientInvalidV2 {
		t.Run(c.Desc, func(t *testing.T) {
			name := string(mustHex(t, c.NameHex))
			if c.Name != nil {
				name = *c.Name
			}
			dst := []byte{0xee}
			got, err := AppendAcquireV2(dst, name, c.LeaseMS, c.Mode, c.Limit)
			if !errors.Is(err, CodeErr(c.Code)) || !bytes.Equal(got, dst) {
				t.Fatalf("AppendAcquireV2 = %x, %v; want code %#x and nothing written", got, err, c.Code)
			}
			// The server refuses the same frame with the same code, read
			// from the wire as the client would have written it.
			frame := binary.BigEndian.AppendUint32([]byte{VersionShared}, c.LeaseMS)
			frame = append(frame, c.Mode)
			frame = binary.BigEndian.AppendUint16(frame, c.Limit)
			frame = binary.BigEndian.AppendUint16(frame, uint16(len(name)))
			frame = append(frame, name...)
			if _, err := ReadAcquire(bytes.NewReader(frame)); !errors.Is(err, CodeErr(c.Code)) {
				t.Fatalf("ReadAcquire = %v, want code %#x", err, c.Code)
			}
		})
	}
}

// Version 1 frames read through ReadAcquire as exclusive claims, exactly
// as ReadAcquireBody reads them; the seed's reader still refuses version 2.
func TestReadAcquireReadsVersion1AsExclusive(t *testing.T) {
	frame, err := AppendAcquire(nil, "jobs/a", 1500)
	if err != nil {
		t.Fatal(err)
	}
	a, err := ReadAcquire(bytes.NewReader(frame[1:]))
	want := Acquire{Version: Version, LeaseMS: 1500, Mode: ModeExclusive, Name: "jobs/a"}
	if err != nil || !reflect.DeepEqual(a, want) || a.Shared() {
		t.Fatalf("ReadAcquire = %+v, %v; want %+v", a, err, want)
	}
	v2, err := AppendAcquireV2(nil, "jobs/a", 1500, ModeShared, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := ReadAcquireBody(bytes.NewReader(v2[1:])); !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("ReadAcquireBody of a v2 frame = %v, want ErrUnsupportedVersion", err)
	}
	for _, version := range []byte{0, 4, 0xff} {
		if _, err := ReadAcquire(bytes.NewReader([]byte{version})); !errors.Is(err, ErrUnsupportedVersion) {
			t.Fatalf("version %d: %v, want ErrUnsupportedVersion at the version byte", version, err)
		}
	}
}

func FuzzReadAcquire(f *testing.F) {
	v1, _ := AppendAcquire(nil, "a", 1000)
	v2, _ := AppendAcquireV2(nil, "a", 1000, ModeShared, 3)
	f.Add(v1[1:])
	f.Add(v2[1:])
	f.Add([]byte{2, 0, 0, 3, 0xe8, 2, 0, 0, 0, 1, 'a'})
	f.Add([]byte{2, 0, 0, 3, 0xe8, 0, 0, 5, 0, 1, 'a'})
	f.Add([]byte{2, 0, 0, 0, 1, 1, 0, 0, 1, 0})
	f.Add([]byte{2, 0, 0, 0, 1, 1, 0, 0, 0, 1, 0xff})
	f.Fuzz(func(t *testing.T, body []byte) {
		a, err := ReadAcquire(bytes.NewReader(body))
		a2, err2 := ReadAcquire(iotest.OneByteReader(bytes.NewReader(body)))
		if !reflect.DeepEqual(a, a2) || (err == nil) != (err2 == nil) {
			t.Fatalf("chunking changed the result: %+v %v / %+v %v", a, err, a2, err2)
		}
		if err != nil {
			return
		}
		if !utf8.ValidString(a.Name) || a.Name == "" || len(a.Name) > MaxNameLen || a.LeaseMS == 0 {
			t.Fatalf("accepted an invalid acquire: %+v", a)
		}
		var frame []byte
		switch a.Version {
		case Version:
			frame, err = AppendAcquire(nil, a.Name, a.LeaseMS)
			if a.Mode != ModeExclusive || a.Limit != 0 {
				t.Fatalf("version 1 read as %+v", a)
			}
		case VersionShared:
			frame, err = AppendAcquireV2(nil, a.Name, a.LeaseMS, a.Mode, a.Limit)
		case VersionValue:
			frame, err = AppendAcquireV3(nil, a.Name, a.LeaseMS, a.Mode, a.Limit, a.Value)
		default:
			t.Fatalf("accepted version %d", a.Version)
		}
		if err != nil {
			t.Fatalf("re-encode %+v: %v", a, err)
		}
		if !bytes.HasPrefix(body, frame[1:]) {
			t.Fatalf("re-encoded %x is not a prefix of %x", frame[1:], body)
		}
	})
}
