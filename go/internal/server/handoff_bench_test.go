package server

import (
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// BenchmarkHandoff is the server's side of a contended lock changing
// hands: per op, a new claim queues behind the holder (ACQUIRE, WAITING),
// the holder closes, and the waiter reads its promotion. handoff-µs is the
// median from the holder's close to the promotion's arrival. The lease
// sub-benchmarks cover both kinds of lease record: up to 10 s one bound
// covers every lock, longer leases are recorded by name.
func BenchmarkHandoff(b *testing.B) {
	for _, lease := range []uint32{10000, 60000} {
		b.Run("lease="+(time.Duration(lease)*time.Millisecond).String(), func(b *testing.B) { handoff(b, lease) })
	}
}

func handoff(b *testing.B, leaseMS uint32) {
	srv := startServer(b, Config{})
	frame, err := protocol.AppendAcquire(nil, "handoff", leaseMS)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 9)
	claim := func() net.Conn {
		c, err := net.Dial("tcp", srv.addr)
		if err != nil {
			b.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(time.Minute))
		if _, err := c.Write(frame); err != nil {
			b.Fatal(err)
		}
		return c
	}
	holder := claim()
	if _, err := io.ReadFull(holder, buf); err != nil || buf[0] != protocol.MsgAcquired {
		b.Fatalf("first claim: %v, reply 0x%02x", err, buf[0])
	}
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w := claim()
		if _, err := io.ReadFull(w, buf[:1]); err != nil || buf[0] != protocol.MsgWaiting {
			b.Fatalf("op %d: %v, reply 0x%02x", i, err, buf[0])
		}
		start := time.Now()
		holder.Close()
		if _, err := io.ReadFull(w, buf); err != nil || buf[0] != protocol.MsgAcquired {
			b.Fatalf("op %d: promotion: %v, reply 0x%02x", i, err, buf[0])
		}
		lat = append(lat, time.Since(start))
		holder = w
	}
	b.StopTimer()
	holder.Close()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "handoff-µs")
}
