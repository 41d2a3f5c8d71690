package client

import (
	"context"
	"crypto/tls"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/server"
	"github.com/monolock/monolock/go/internal/testcerts"
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
	parallelCycles(b, func(name string) (*Lock, error) { return c.Acquire(context.Background(), name) })
}

// parallelCycles runs acquire of a fresh name, then Release, on every
// worker of b.RunParallel.
func parallelCycles(b *testing.B, acquire func(name string) (*Lock, error)) {
	parallelWorkerCycles(b, func() (func(string) (*Lock, error), func()) { return acquire, func() {} })
}

// parallelWorkerCycles is parallelCycles where each worker first sets up
// an acquire of its own (nil when it cannot), torn down by its done.
func parallelWorkerCycles(b *testing.B, worker func() (acquire func(name string) (*Lock, error), done func())) {
	var seq atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		acquire, done := worker()
		if acquire == nil {
			return
		}
		defer done()
		for pb.Next() {
			l, err := acquire("cycle/" + strconv.FormatInt(seq.Add(1), 10))
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
	s, err := c.Session(context.Background())
	require.NoError(b, err)
	b.Cleanup(func() { s.Close() })
	parallelCycles(b, func(name string) (*Lock, error) { return s.Acquire(context.Background(), name) })
}

// BenchmarkSessionPerWorkerCycle is the benchmark's monolock-session
// system in-process: 8 workers per CPU, each with a session of its own
// and one claim at a time on it, so nothing is coalesced and every frame
// is a write and a read of its own.
func BenchmarkSessionPerWorkerCycle(b *testing.B) {
	srv := testserver.Start(b, server.Config{}, time.Minute)
	b.Cleanup(func() { require.NoError(b, srv.Stop()) })
	c, err := New(WithServers(srv.Addr), WithLease(10*time.Second))
	require.NoError(b, err)
	b.SetParallelism(8)
	parallelWorkerCycles(b, func() (func(string) (*Lock, error), func()) {
		s, err := c.Session(context.Background())
		if err != nil {
			b.Error(err)
			return nil, nil
		}
		return func(name string) (*Lock, error) { return s.Acquire(context.Background(), name) }, func() { s.Close() }
	})
}

// BenchmarkTLSCycle is the cycle over TLS 1.3, one worker at a time
// (-cpu 1): a claim on a connection of its own with a full handshake each
// time (no session cache), the same resuming the TLS session of the one
// before (the client's default), and claims on one session, which pays its
// handshake once. Compare each with BenchmarkAcquireReleaseCycle and
// BenchmarkSessionCycle, their plain counterparts.
func BenchmarkTLSCycle(b *testing.B) {
	cert, pool := testcerts.LoopbackServer(b)
	srv := testserver.StartOn(b, server.Config{}, time.Minute, func(ln net.Listener) net.Listener {
		return server.NewTLSListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
	})
	b.Cleanup(func() { require.NoError(b, srv.Stop()) })
	ctx := context.Background()
	var seq atomic.Int64
	cycle := func(b *testing.B, acquire func(string) (*Lock, error)) {
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			l, err := acquire("tls-cycle/" + strconv.FormatInt(seq.Add(1), 10))
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(); err != nil {
				b.Fatal(err)
			}
		}
	}
	client := func(cache tls.ClientSessionCache) *Client {
		c, err := New(WithServers(srv.Addr), WithLease(10*time.Second),
			WithTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13, ClientSessionCache: cache}))
		require.NoError(b, err)
		return c
	}
	b.Run("claim/full-handshake", func(b *testing.B) {
		c := client(noSessionCache{})
		cycle(b, func(name string) (*Lock, error) { return c.Acquire(ctx, name) })
	})
	b.Run("claim/resumed", func(b *testing.B) {
		c := client(nil)
		cycle(b, func(name string) (*Lock, error) { return c.Acquire(ctx, name) })
	})
	b.Run("session", func(b *testing.B) {
		s, err := client(nil).Session(ctx)
		require.NoError(b, err)
		defer s.Close()
		cycle(b, func(name string) (*Lock, error) { return s.Acquire(ctx, name) })
	})
}

// noSessionCache keeps no TLS session: every handshake is a full one.
type noSessionCache struct{}

func (noSessionCache) Get(string) (*tls.ClientSessionState, bool) { return nil, false }
func (noSessionCache) Put(string, *tls.ClientSessionState)        {}
