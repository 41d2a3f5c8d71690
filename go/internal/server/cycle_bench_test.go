package server

import (
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// BenchmarkAcquireReleaseCycle is the server's side of the uncontended
// workload of docs/benchmarks.md: connect, ACQUIRE a fresh name, read
// ACQUIRED, close. Run with -cpu 1,2 and -cpuprofile to see where a cycle
// goes (accept, session start, lock table, token, close). allocs/op counts
// the raw client too.
func BenchmarkAcquireReleaseCycle(b *testing.B) {
	srv := startServer(b, Config{})
	addr := srv.addr
	var seq atomic.Int64

	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		reply := make([]byte, 9)
		frame := make([]byte, 0, 64)
		for pb.Next() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Error(err)
				return
			}
			frame, _ = protocol.AppendAcquire(frame[:0], fmt.Sprintf("cycle/%d", seq.Add(1)), 10000)
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.Write(frame); err == nil {
				_, err = io.ReadFull(c, reply)
			}
			c.Close()
			if err != nil || reply[0] != protocol.MsgAcquired {
				b.Errorf("cycle: %v, reply 0x%02x", err, reply[0])
				return
			}
		}
	})
	b.StopTimer()
	// Shutdown (at cleanup) waits for every session to end.
}
