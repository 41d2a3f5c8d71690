package server

import (
	"bufio"
	"fmt"
	"net"
	"slices"
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

// BenchmarkSessionHandoff is BenchmarkHandoff on sessions: two sessions
// take turns on one name; per op the waiter's claim is queued (WAITING),
// the holder sends RELEASE, and the waiter reads its promotion.
// handoff-µs and handoff-p99-µs run from the RELEASE's send to the
// promotion's arrival.
func BenchmarkSessionHandoff(b *testing.B) {
	srv := startServer(b, Config{})
	type side struct {
		conn net.Conn
		in   *bufio.Reader
		id   uint32
	}
	open := func() *side {
		conn, err := net.Dial("tcp", srv.addr)
		if err != nil {
			b.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(time.Hour))
		s := &side{conn: conn, in: bufio.NewReader(conn)}
		frame, _ := protocol.AppendSession(nil, 10000)
		if _, err := conn.Write(frame); err != nil {
			b.Fatal(err)
		}
		if f, err := protocol.ReadSessionFrame(s.in); err != nil || f.Type != protocol.MsgSessionOK {
			b.Fatalf("session: %v %+v", err, f)
		}
		return s
	}
	claim := func(s *side) {
		s.id++
		frame := protocol.AppendStreamHeader(nil, protocol.MsgOpen, s.id)
		frame, _ = protocol.AppendAcquire(frame, "session-handoff", 10000)
		if _, err := s.conn.Write(frame); err != nil {
			b.Fatal(err)
		}
	}
	next := func(s *side) protocol.SessionFrame {
		f, err := protocol.ReadSessionFrame(s.in)
		if err != nil {
			b.Fatal(err)
		}
		return f
	}
	holder, waiter := open(), open()
	defer holder.conn.Close()
	defer waiter.conn.Close()
	claim(holder)
	if f := next(holder); f.Inner != protocol.MsgAcquired {
		b.Fatalf("first claim: %+v", f)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		claim(waiter)
		if f := next(waiter); f.Inner != protocol.MsgWaiting {
			b.Fatalf("op %d: %+v", i, f)
		}
		start := time.Now()
		if _, err := holder.conn.Write(protocol.AppendStreamHeader(nil, protocol.MsgRelease, holder.id)); err != nil {
			b.Fatal(err)
		}
		if f := next(waiter); f.Inner != protocol.MsgAcquired {
			b.Fatalf("op %d: promotion: %+v", i, f)
		}
		lat = append(lat, time.Since(start))
		if f := next(holder); f.Type != protocol.MsgReleased {
			b.Fatalf("op %d: release: %+v", i, f)
		}
		holder, waiter = waiter, holder
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "handoff-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "handoff-p99-µs")
}
