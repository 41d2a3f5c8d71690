package client

// Tests against the real server, started in-process on a loopback port.

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/server"
	"github.com/monolock/monolock/go/internal/testserver"
	"github.com/monolock/monolock/go/pkg/protocol"
)

func startRealServer(t *testing.T) *testserver.Server {
	t.Helper()
	return testserver.Start(t, server.Config{}, wait)
}

func mustAcquire(t *testing.T, c *Client, name string) *Lock {
	t.Helper()
	lock, err := c.Acquire(ctxTimeout(t, wait), name)
	require.NoError(t, err)
	t.Cleanup(func() { lock.Release() })
	return lock
}

func TestRealAcquireReleaseTokensGrow(t *testing.T) {
	srv := startRealServer(t)
	c := newClient(t, srv.Addr, time.Second)
	a := mustAcquire(t, c, "jobs/x")
	require.NoError(t, a.Err())
	require.NoError(t, a.Release())
	b := mustAcquire(t, c, "jobs/x")
	other := mustAcquire(t, c, "jobs/y")
	assert.Greater(t, b.Token(), a.Token())
	assert.Greater(t, other.Token(), b.Token())
	require.ErrorIs(t, a.Err(), ErrReleased)
}

func TestRealWaitersPromotedInOrder(t *testing.T) {
	srv := startRealServer(t)
	queued := make(chan string, 4)
	onWaiting := WithOnWaiting(func(name string) { queued <- name })
	holder := mustAcquire(t, newClient(t, srv.Addr, time.Second), "fifo")

	first := acquireAsync(ctxTimeout(t, wait), newClient(t, srv.Addr, time.Second, onWaiting), "fifo", false)
	require.Equal(t, "fifo", receive(t, queued))
	second := acquireAsync(ctxTimeout(t, wait), newClient(t, srv.Addr, time.Second, onWaiting), "fifo", false)
	require.Equal(t, "fifo", receive(t, queued))

	require.NoError(t, holder.Release())
	r1 := result(t, first)
	require.NoError(t, r1.err)
	assert.Greater(t, r1.lock.Token(), holder.Token())
	select {
	case r := <-second:
		t.Fatalf("second waiter granted while the first holds the lock: %v", r.err)
	case <-time.After(200 * time.Millisecond):
	}
	require.NoError(t, r1.lock.Release())
	r2 := result(t, second)
	require.NoError(t, r2.err)
	assert.Greater(t, r2.lock.Token(), r1.lock.Token())
	require.NoError(t, r2.lock.Release())
}

func receive[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(wait):
		t.Fatal("nothing received")
		var zero T
		return zero
	}
}

func TestRealTryAcquireBusy(t *testing.T) {
	srv := startRealServer(t)
	c := newClient(t, srv.Addr, time.Second)
	held := mustAcquire(t, c, "try")
	_, err := c.TryAcquire(context.Background(), "try")
	require.ErrorIs(t, err, ErrBusy)
	require.NoError(t, held.Release())
	// Release returns once the server has let go: a try right after it
	// never finds the lock busy.
	for i := 0; i < 20; i++ {
		again, err := c.TryAcquire(context.Background(), "try")
		require.NoError(t, err, "round %d", i)
		require.NoError(t, again.Release())
	}
}

// TestRealHeartbeatsKeepTheLock holds a lock for several leases: only the
// heartbeats keep the server from dropping the session.
func TestRealHeartbeatsKeepTheLock(t *testing.T) {
	srv := startRealServer(t)
	// A lease long enough for a loaded machine: the client timeout is
	// 0.8 x lease, and heartbeats go several times within it.
	const lease = time.Second
	c := newClient(t, srv.Addr, lease)
	lock := mustAcquire(t, c, "long")
	granted, first := time.Now(), lock.ValidUntil()
	select {
	case <-lock.Done():
		t.Fatalf("lock lost %v after the grant (lease %v): %v; the last ack left it valid until %v after the grant",
			time.Since(granted).Round(time.Millisecond), lease, lock.Err(), lock.ValidUntil().Sub(granted).Round(time.Millisecond))
	case <-time.After(4 * lease):
	}
	require.NoError(t, lock.Err())
	assert.True(t, lock.ValidUntil().After(first.Add(2*lease)), "validity must move with the acks")
	_, err := c.TryAcquire(context.Background(), "long")
	require.ErrorIs(t, err, ErrBusy, "the server still sees the holder")
	// The waiters' side heartbeats too: a queued client keeps its place.
	w := acquireAsync(ctxTimeout(t, wait), c, "long", false)
	time.Sleep(3 * lease / 2)
	require.NoError(t, lock.Release())
	r := result(t, w)
	require.NoError(t, r.err)
	require.NoError(t, r.lock.Release())
}

func TestRealCancelledWaiterLeavesTheQueue(t *testing.T) {
	srv := startRealServer(t)
	var waits atomic.Int32
	c := newClient(t, srv.Addr, time.Second, WithOnWaiting(func(string) { waits.Add(1) }))
	holder := mustAcquire(t, c, "q")
	ctx, cancel := context.WithCancel(context.Background())
	gone := acquireAsync(ctx, c, "q", false)
	require.Eventually(t, func() bool { return waits.Load() == 1 }, wait, 5*time.Millisecond)
	cancel()
	require.ErrorIs(t, result(t, gone).err, context.Canceled)
	require.Eventually(t, func() bool {
		for _, l := range srv.Locks() {
			if l.Name == "q" {
				return len(l.Waiters) == 0
			}
		}
		return false
	}, wait, 5*time.Millisecond, "the server must drop the cancelled waiter")
	require.NoError(t, holder.Release())
}

func TestRealKickLosesTheLockAndPromotes(t *testing.T) {
	srv := startRealServer(t)
	c := newClient(t, srv.Addr, time.Second)
	lock := mustAcquire(t, c, "kick")
	next := acquireAsync(ctxTimeout(t, wait), c, "kick", false)
	var holder uint64
	require.Eventually(t, func() bool {
		for _, l := range srv.Locks() {
			if l.Name == "kick" && l.Holder != nil && len(l.Waiters) == 1 {
				holder = l.Holder.Session
				return true
			}
		}
		return false
	}, wait, 5*time.Millisecond)
	require.True(t, srv.Kick(holder))
	lockDone(t, lock)
	require.ErrorIs(t, lock.Err(), ErrLockLost)
	require.ErrorIs(t, lock.Err(), protocol.ErrAdminClosed)
	r := result(t, next)
	require.NoError(t, r.err)
	assert.Greater(t, r.lock.Token(), lock.Token())
	require.NoError(t, r.lock.Release())
}

func TestRealShutdown(t *testing.T) {
	srv := startRealServer(t)
	c := newClient(t, srv.Addr, time.Second)
	lock := mustAcquire(t, c, "down")
	start := time.Now()
	waiter := acquireAsync(ctxTimeout(t, 800*time.Millisecond), c, "down", false)
	require.Eventually(t, func() bool {
		for _, l := range srv.Locks() {
			if l.Name == "down" {
				return len(l.Waiters) == 1
			}
		}
		return false
	}, wait, 5*time.Millisecond)
	require.NoError(t, srv.Shutdown(ctxTimeout(t, wait)))

	lockDone(t, lock)
	require.ErrorIs(t, lock.Err(), ErrLockLost)
	require.ErrorIs(t, lock.Err(), protocol.ErrShuttingDown)
	// The waiter treats 0x01 as temporary and retries until its deadline.
	r := result(t, waiter)
	require.ErrorIs(t, r.err, context.DeadlineExceeded)
	assert.GreaterOrEqual(t, time.Since(start), 700*time.Millisecond, "a temporary error must not end the wait")
}

// partitionProxy forwards TCP between a client and the real server until
// partition is called; from then on it drops every byte in both directions
// and keeps both sockets open, like a network that silently died.
type partitionProxy struct {
	ln          net.Listener
	partitioned atomic.Bool
}

func newPartitionProxy(t *testing.T, upstream string) *partitionProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &partitionProxy{ln: ln}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", upstream)
			if err != nil {
				down.Close()
				continue
			}
			conns = append(conns, down, up)
			go p.pipe(down, up)
			go p.pipe(up, down)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return p
}

func (p *partitionProxy) pipe(from, to net.Conn) {
	buf := make([]byte, 512)
	for {
		n, err := from.Read(buf)
		if p.partitioned.Load() {
			if err != nil {
				return // leave the other side hanging: nothing crosses a partition
			}
			continue
		}
		if n > 0 {
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			to.Close()
			return
		}
	}
}

// TestRealPartitionedHolderGivesUpFirst: when the network between holder and
// server dies, the holder reports the loss before the server can expire the
// session and grant the lock to the next waiter.
func TestRealPartitionedHolderGivesUpFirst(t *testing.T) {
	srv := startRealServer(t)
	proxy := newPartitionProxy(t, srv.Addr)
	const lease = 400 * time.Millisecond
	holder := mustAcquire(t, newClient(t, proxy.ln.Addr().String(), lease), "part")
	next := acquireAsync(ctxTimeout(t, wait), newClient(t, srv.Addr, lease), "part", false)
	time.Sleep(300 * time.Millisecond) // a few heartbeats go through

	cut := time.Now()
	proxy.partitioned.Store(true)
	lost := lockDone(t, holder)
	require.ErrorIs(t, holder.Err(), ErrClientTimeout)
	assert.LessOrEqual(t, holder.ValidUntil().Sub(cut), 320*time.Millisecond, "validity ran past 0.8 x lease from the cut")

	r := result(t, next)
	require.NoError(t, r.err)
	defer r.lock.Release()
	assert.True(t, r.at.After(lost), "the next holder was granted %v before the old one gave up", lost.Sub(r.at))
	assert.True(t, r.at.After(holder.ValidUntil()))
	assert.Greater(t, r.lock.Token(), holder.Token())
}
