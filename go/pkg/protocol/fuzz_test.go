package protocol

import (
	"bytes"
	"testing"
	"testing/iotest"
	"unicode/utf8"
)

// Each reader must never panic, must agree with itself whether the input
// arrives whole or one byte at a time, and what it accepts must re-encode to
// the bytes it read.

func FuzzReadAcquireBody(f *testing.F) {
	f.Add(acquireBody(1, 1000, 1, "a"))
	f.Add(acquireBody(1, 0, 0, ""))
	f.Add(acquireBody(1, 1, 256, ""))
	f.Add(acquireBody(2, 1, 1, "a"))
	f.Add(acquireBody(1, 1, 1, "\xff"))
	f.Fuzz(func(t *testing.T, body []byte) {
		v, lease, name, err := ReadAcquireBody(bytes.NewReader(body))
		v2, lease2, name2, err2 := ReadAcquireBody(iotest.OneByteReader(bytes.NewReader(body)))
		if v != v2 || lease != lease2 || name != name2 || (err == nil) != (err2 == nil) {
			t.Fatalf("chunking changed the result: %v/%v", err, err2)
		}
		if err != nil {
			return
		}
		if !utf8.ValidString(name) || len(name) == 0 || len(name) > MaxNameLen || lease == 0 {
			t.Fatalf("accepted an invalid acquire: lease=%d name=%q", lease, name)
		}
		frame, err := AppendAcquire(nil, name, lease)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if !bytes.HasPrefix(body, frame[1:]) {
			t.Fatalf("re-encoded %x is not a prefix of %x", frame[1:], body)
		}
	})
}

func FuzzReadErrorBody(f *testing.F) {
	f.Add([]byte{0x13, 0})
	f.Add([]byte{0x01, 3, 'a', 'b', 'c'})
	f.Add([]byte{0x02, 200})
	f.Fuzz(func(t *testing.T, body []byte) {
		code, reason, err := ReadErrorBody(bytes.NewReader(body))
		code2, reason2, err2 := ReadErrorBody(iotest.OneByteReader(bytes.NewReader(body)))
		if code != code2 || reason != reason2 || (err == nil) != (err2 == nil) {
			t.Fatalf("chunking changed the result: %v/%v", err, err2)
		}
		if err != nil {
			return
		}
		frame := AppendError(nil, code, reason)
		if !bytes.HasPrefix(body, frame[1:]) {
			t.Fatalf("re-encoded %x is not a prefix of %x", frame[1:], body)
		}
	})
}

func FuzzReadAcquiredBody(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, body []byte) {
		tok, err := ReadAcquiredBody(bytes.NewReader(body))
		if len(body) < 8 {
			if err == nil {
				t.Fatal("short body accepted")
			}
			return
		}
		if err != nil || !bytes.Equal(AppendAcquired(nil, tok)[1:], body[:8]) {
			t.Fatalf("round trip failed: %v", err)
		}
	})
}

func FuzzAppendError(f *testing.F) {
	f.Add(uint8(1), "reason")
	f.Fuzz(func(t *testing.T, code uint8, reason string) {
		frame := AppendError(nil, code, reason)
		c, r, err := ReadErrorBody(bytes.NewReader(frame[1:]))
		if err != nil || c != code || len(r) > 255 {
			t.Fatalf("bad frame %x: %v", frame, err)
		}
		if utf8.ValidString(reason) && !utf8.ValidString(r) {
			t.Fatalf("truncation split a character: %q", r)
		}
	})
}
