package protocol

import (
	"bytes"
	"testing"
)

// Micro-benchmarks of frame encoding and decoding, with allocation counts.
// Run: cd go && go test -run '^$' -bench . -benchmem ./pkg/protocol
//
// Encoders append to a caller's buffer, so with a reused buffer they must
// not allocate; the pins below fail if one starts to.

func BenchmarkAppendAcquire(b *testing.B) {
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = AppendAcquire(buf[:0], "jobs/nightly-report", 10000); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendAcquired(b *testing.B) {
	buf := make([]byte, 0, 16)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendAcquired(buf[:0], 0x0102030405060708)
	}
}

func BenchmarkAppendError(b *testing.B) {
	buf := make([]byte, 0, 300)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendError(buf[:0], ErrUnknownMessage.Code, "unknown message type: 0x7f")
	}
}

// benchRead decodes one body from a reader that is rewound each time.
func benchRead(b *testing.B, body []byte, read func(*bytes.Reader) error) {
	r := bytes.NewReader(body)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		r.Reset(body)
		if err := read(r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadAcquireBody(b *testing.B) {
	frame, err := AppendAcquire(nil, "jobs/nightly-report", 10000)
	if err != nil {
		b.Fatal(err)
	}
	benchRead(b, frame[1:], func(r *bytes.Reader) error {
		_, _, _, err := ReadAcquireBody(r)
		return err
	})
}

func BenchmarkReadAcquiredBody(b *testing.B) {
	benchRead(b, AppendAcquired(nil, 42)[1:], func(r *bytes.Reader) error {
		_, err := ReadAcquiredBody(r)
		return err
	})
}

func BenchmarkReadErrorBody(b *testing.B) {
	benchRead(b, AppendError(nil, 0x15, "lock name too long")[1:], func(r *bytes.Reader) error {
		_, _, err := ReadErrorBody(r)
		return err
	})
}

// TestEncodersDoNotAllocate pins the zero-allocation encoders, so a change
// that makes the per-frame path allocate fails a test, not just a benchmark.
func TestEncodersDoNotAllocate(t *testing.T) {
	buf := make([]byte, 0, 300)
	for name, f := range map[string]func(){
		"AppendAcquire":  func() { buf, _ = AppendAcquire(buf[:0], "jobs/x", 1000) },
		"AppendAcquired": func() { buf = AppendAcquired(buf[:0], 7) },
		"AppendError":    func() { buf = AppendError(buf[:0], 0x13, "unknown message type: 0x7f") },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocations per call, want 0", name, n)
		}
	}
}
