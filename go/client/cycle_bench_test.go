package client

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/server"
	"github.com/monolock/monolock/go/internal/testserver"
)

// BenchmarkAcquireReleaseCycle is the client's side of the uncontended
// workload of docs/benchmarks.md: Acquire a fresh name, then Release, against
// an in-process server over loopback TCP. The process holds both ends, so
// allocs/op and a -cpuprofile count the server too; pprof's -focus=client
// separates the client's share. Run with -cpu 1 for one worker, -cpu 2 and
// a higher -benchtime for the parallel case.
func BenchmarkAcquireReleaseCycle(b *testing.B) {
	srv := testserver.Start(b, server.Config{}, time.Minute)
	b.Cleanup(func() { require.NoError(b, srv.Stop()) })
	c, err := New(WithServers(srv.Addr), WithLease(10*time.Second))
	require.NoError(b, err)
	var seq atomic.Int64
	ctx := context.Background()

	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l, err := c.Acquire(ctx, "cycle/"+strconv.FormatInt(seq.Add(1), 10))
			if err != nil {
				b.Error(err)
				return
			}
			if err := l.Release(); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
}

// BenchmarkSessionCycle is BenchmarkAcquireReleaseCycle over one session:
// OPEN a fresh name, ACQUIRED, RELEASE, RELEASED, every worker on the
// same connection, so the two show what a session saves (a connection
// per lock) and what it costs (one connection's reader and writes for
// every worker).
func BenchmarkSessionCycle(b *testing.B) {
	srv := testserver.Start(b, server.Config{}, time.Minute)
	b.Cleanup(func() { require.NoError(b, srv.Stop()) })
	c, err := New(WithServers(srv.Addr), WithLease(10*time.Second))
	require.NoError(b, err)
	ctx := context.Background()
	s, err := c.Session(ctx)
	require.NoError(b, err)
	b.Cleanup(func() { s.Close() })
	var seq atomic.Int64

	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l, err := s.Acquire(ctx, "cycle/"+strconv.FormatInt(seq.Add(1), 10))
			if err != nil {
				b.Error(err)
				return
			}
			if err := l.Release(); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
}
