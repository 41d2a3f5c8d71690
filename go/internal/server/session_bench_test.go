package server

import (
	"bufio"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// BenchmarkSessionCycle is the session's cycle of docs/benchmarks.md on
// the server alone: on an open session, OPEN a fresh name, read its
// ACQUIRED, RELEASE it, read RELEASED. Each parallel worker has its own
// session (-cpu sets how many); compare with BenchmarkAcquireReleaseCycle,
// the same grant and release on a connection each.
func BenchmarkSessionCycle(b *testing.B) {
	srv := startServer(b, Config{})
	var seq atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		conn, err := net.Dial("tcp", srv.addr)
		if err != nil {
			b.Error(err)
			return
		}
		defer conn.Close()
		in := bufio.NewReader(conn)
		frame, _ := protocol.AppendSession(nil, 10000)
		if _, err := conn.Write(frame); err != nil {
			b.Error(err)
			return
		}
		if f, err := protocol.ReadSessionFrame(in); err != nil || f.Type != protocol.MsgSessionOK {
			b.Errorf("session: %v %+v", err, f)
			return
		}
		var id uint32
		for pb.Next() {
			id++
			frame = protocol.AppendStreamHeader(frame[:0], protocol.MsgOpen, id)
			frame, _ = protocol.AppendAcquire(frame, fmt.Sprintf("session-cycle/%d", seq.Add(1)), 10000)
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := conn.Write(frame); err != nil {
				b.Error(err)
				return
			}
			if f, err := protocol.ReadSessionFrame(in); err != nil || f.Inner != protocol.MsgAcquired {
				b.Errorf("open: %v %+v", err, f)
				return
			}
			if _, err := conn.Write(protocol.AppendStreamHeader(frame[:0], protocol.MsgRelease, id)); err != nil {
				b.Error(err)
				return
			}
			if f, err := protocol.ReadSessionFrame(in); err != nil || f.Type != protocol.MsgReleased {
				b.Errorf("release: %v %+v", err, f)
				return
			}
		}
	})
}
