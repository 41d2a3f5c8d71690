package client

// Sessions against the real server, in-process on a loopback port.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/server"
	"github.com/monolock/monolock/go/internal/testserver"
	"github.com/monolock/monolock/go/pkg/protocol"
)

func realSession(t *testing.T, c *Client) *Session {
	t.Helper()
	s, err := c.Session(ctxTimeout(t, wait))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// sessionAcquireAsync runs s.Acquire (or TryAcquire) on its own goroutine.
func sessionAcquireAsync(ctx context.Context, s *Session, name string, try bool, opts ...AcquireOption) <-chan acquireResult {
	ch := make(chan acquireResult, 1)
	go func() {
		var r acquireResult
		if try {
			r.lock, r.err = s.TryAcquire(ctx, name, opts...)
		} else {
			r.lock, r.err = s.Acquire(ctx, name, opts...)
		}
		r.at = time.Now()
		ch <- r
	}()
	return ch
}

// holderSession is the server's id of the claim that holds name (0: none).
func holderSession(srv *testserver.Server, name string) uint64 {
	for _, l := range srv.Locks() {
		if l.Name == name && l.Holder != nil {
			return l.Holder.Session
		}
	}
	return 0
}

func TestRealSessionPipelinedAcquires(t *testing.T) {
	srv := startRealServer(t)
	s := realSession(t, newClient(t, srv.Addr, time.Second))
	assert.Equal(t, protocol.DefaultMaxStreams, s.MaxStreams())
	const n = 50
	var wg sync.WaitGroup
	locks := make([]*Lock, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			locks[i], errs[i] = s.Acquire(ctxTimeout(t, wait), fmt.Sprintf("pipe/%d", i))
		}()
	}
	wg.Wait()
	tokens := map[uint64]bool{}
	for i := range n {
		require.NoError(t, errs[i], "claim %d", i)
		require.NoError(t, locks[i].Err())
		tokens[locks[i].Token()] = true
	}
	assert.Len(t, tokens, n, "every grant has its own token")
	for i := range n {
		assert.NotZero(t, holderSession(srv, fmt.Sprintf("pipe/%d", i)), "the server holds claim %d", i)
	}
	require.NoError(t, s.Err())
}

func TestRealSessionSameNameTwice(t *testing.T) {
	srv := startRealServer(t)
	queued := make(chan string, 2)
	s := realSession(t, newClient(t, srv.Addr, time.Second, WithOnWaiting(func(n string) { queued <- n })))
	first, err := s.Acquire(ctxTimeout(t, wait), "dup")
	require.NoError(t, err)
	second := sessionAcquireAsync(ctxTimeout(t, wait), s, "dup", false)
	require.Equal(t, "dup", receive(t, queued))
	select {
	case r := <-second:
		t.Fatalf("the second claim was granted while the first holds: %v", r.err)
	case <-time.After(200 * time.Millisecond):
	}
	require.NoError(t, first.Release())
	r := result(t, second)
	require.NoError(t, r.err)
	assert.Greater(t, r.lock.Token(), first.Token())
	require.NoError(t, r.lock.Release())
}

// TestRealSessionReleaseIsAcknowledged: once Release returns the lock is
// free on the server, so another client's try never finds it busy.
func TestRealSessionReleaseIsAcknowledged(t *testing.T) {
	srv := startRealServer(t)
	other := newClient(t, srv.Addr, time.Second)
	s := realSession(t, newClient(t, srv.Addr, time.Second))
	for i := range 20 {
		l, err := s.Acquire(ctxTimeout(t, wait), "ack")
		require.NoError(t, err)
		require.NoError(t, l.Release())
		require.ErrorIs(t, l.Err(), ErrReleased)
		o, err := other.TryAcquire(context.Background(), "ack")
		require.NoError(t, err, "round %d", i)
		require.NoError(t, o.Release())
	}
}

func TestRealSessionKickOneClaim(t *testing.T) {
	srv := startRealServer(t)
	s := realSession(t, newClient(t, srv.Addr, time.Second))
	a, err := s.Acquire(ctxTimeout(t, wait), "kick/a")
	require.NoError(t, err)
	b, err := s.Acquire(ctxTimeout(t, wait), "kick/b")
	require.NoError(t, err)
	ida, idb := holderSession(srv, "kick/a"), holderSession(srv, "kick/b")
	require.NotZero(t, ida)
	require.NotEqual(t, ida, idb, "each claim of a session has an id of its own")
	require.True(t, srv.Kick(ida))
	lockDone(t, a)
	require.ErrorIs(t, a.Err(), ErrLockLost)
	require.ErrorIs(t, a.Err(), protocol.ErrAdminClosed)
	// The session and its other claim live on, through heartbeats.
	time.Sleep(time.Second)
	require.NoError(t, b.Err())
	require.NoError(t, s.Err())
	c, err := s.Acquire(ctxTimeout(t, wait), "kick/a")
	require.NoError(t, err, "the kicked name is free, and the session takes more claims")
	assert.Greater(t, c.Token(), a.Token())
}

// TestRealSessionPartitionedGivesUpFirst: when the link goes silent, every
// claim of the session is told lost before the server could grant any of
// them to another client.
func TestRealSessionPartitionedGivesUpFirst(t *testing.T) {
	srv := startRealServer(t)
	proxy := newPartitionProxy(t, srv.Addr)
	const lease = 400 * time.Millisecond
	s := realSession(t, newClient(t, proxy.ln.Addr().String(), lease))
	holder, err := s.Acquire(ctxTimeout(t, wait), "part")
	require.NoError(t, err)
	bystander, err := s.Acquire(ctxTimeout(t, wait), "part/other")
	require.NoError(t, err)
	next := acquireAsync(ctxTimeout(t, wait), newClient(t, srv.Addr, lease), "part", false)
	time.Sleep(300 * time.Millisecond) // a few heartbeats go through

	cut := time.Now()
	proxy.partitioned.Store(true)
	lost := lockDone(t, holder)
	lockDone(t, bystander)
	require.ErrorIs(t, holder.Err(), ErrClientTimeout)
	require.ErrorIs(t, bystander.Err(), ErrClientTimeout)
	require.ErrorIs(t, s.Err(), ErrClientTimeout)
	assert.LessOrEqual(t, holder.ValidUntil().Sub(cut), 320*time.Millisecond, "validity ran past 0.8 x lease from the cut")

	r := result(t, next)
	require.NoError(t, r.err)
	defer r.lock.Release()
	assert.True(t, r.at.After(lost), "the next holder was granted %v before the session gave up", lost.Sub(r.at))
	assert.True(t, r.at.After(holder.ValidUntil()))
	assert.Greater(t, r.lock.Token(), holder.Token())
}

func TestRealSessionSharedAndSemaphore(t *testing.T) {
	srv := startRealServer(t)
	s := realSession(t, newClient(t, srv.Addr, time.Second))
	ctx := ctxTimeout(t, wait)
	p1, err := s.Acquire(ctx, "sem", Limit(2))
	require.NoError(t, err)
	p2, err := s.Acquire(ctx, "sem", Limit(2))
	require.NoError(t, err)
	assert.NotEqual(t, p1.Token(), p2.Token())
	_, err = s.TryAcquire(ctx, "sem", Limit(2))
	require.ErrorIs(t, err, ErrBusy)
	assert.Contains(t, err.Error(), `all 2 permits of "sem" are taken`)
	_, err = s.Acquire(ctx, "sem", Limit(3))
	require.ErrorIs(t, err, protocol.ErrLimitMismatch, "a refusal ends the stream")
	require.NoError(t, s.Err(), "and not the session")

	r1, err := s.Acquire(ctx, "rw", Shared())
	require.NoError(t, err)
	r2, err := s.Acquire(ctx, "rw", Shared())
	require.NoError(t, err)
	writer := sessionAcquireAsync(ctx, s, "rw", false)
	select {
	case r := <-writer:
		t.Fatalf("an exclusive claim was granted beside readers: %v", r.err)
	case <-time.After(200 * time.Millisecond):
	}
	require.NoError(t, r1.Release())
	require.NoError(t, r2.Release())
	w := result(t, writer)
	require.NoError(t, w.err)
	require.NoError(t, w.lock.Release())
}

func TestRealSessionValueAndProclaim(t *testing.T) {
	srv := startRealServer(t)
	c := newClient(t, srv.Addr, time.Second)
	s := realSession(t, c)
	w, err := c.Watch(ctxTimeout(t, wait), "svc/leader")
	require.NoError(t, err)
	defer w.Close()
	lock, err := s.Acquire(ctxTimeout(t, wait), "svc/leader", Value([]byte("10.0.0.7:8080")))
	require.NoError(t, err)
	holderValue := func() string {
		st := w.State()
		if len(st.Holders) != 1 {
			return ""
		}
		return string(st.Holders[0].Value)
	}
	require.Eventually(t, func() bool { return holderValue() == "10.0.0.7:8080" }, wait, 5*time.Millisecond)
	require.NoError(t, lock.Proclaim(ctxTimeout(t, wait), []byte("10.0.0.7:9090")))
	require.Eventually(t, func() bool { return holderValue() == "10.0.0.7:9090" }, wait, 5*time.Millisecond)
	st := w.State()
	require.Len(t, st.Holders, 1)
	assert.Equal(t, lock.Token(), st.Holders[0].Token, "a proclaim keeps the token")

	// A claim without a value can proclaim in a session too.
	plain, err := s.Acquire(ctxTimeout(t, wait), "svc/plain")
	require.NoError(t, err)
	require.NoError(t, plain.Proclaim(ctxTimeout(t, wait), []byte("x")))
}

// TestRealSessionTryAcquireBusy: the abandoned place is gone from the
// queue when TryAcquire returns, so the holder's release cannot promote it.
func TestRealSessionTryAcquireBusy(t *testing.T) {
	srv := startRealServer(t)
	c := newClient(t, srv.Addr, time.Second)
	held := mustAcquire(t, c, "try")
	s := realSession(t, c)
	_, err := s.TryAcquire(ctxTimeout(t, wait), "try")
	require.ErrorIs(t, err, ErrBusy)
	assert.Contains(t, err.Error(), `lock "try" is held by another session`)
	require.NoError(t, held.Release())
	again, err := c.TryAcquire(context.Background(), "try")
	require.NoError(t, err, "the abandoned claim was promoted")
	require.NoError(t, again.Release())
}

func TestRealSessionCloseReleasesEverything(t *testing.T) {
	srv := startRealServer(t)
	c := newClient(t, srv.Addr, time.Second)
	s := realSession(t, c)
	var locks []*Lock
	for i := range 3 {
		l, err := s.Acquire(ctxTimeout(t, wait), fmt.Sprintf("close/%d", i))
		require.NoError(t, err)
		locks = append(locks, l)
	}
	waiter := sessionAcquireAsync(ctxTimeout(t, wait), s, "close/0", false)
	require.Eventually(t, func() bool {
		for _, l := range srv.Locks() {
			if l.Name == "close/0" {
				return len(l.Waiters) == 1
			}
		}
		return false
	}, wait, 5*time.Millisecond)
	require.NoError(t, s.Close())
	require.ErrorIs(t, result(t, waiter).err, ErrSessionClosed)
	for i, l := range locks {
		require.ErrorIs(t, l.Err(), ErrReleased, "a closed session's claims are released, not lost")
		o, err := c.TryAcquire(context.Background(), fmt.Sprintf("close/%d", i))
		require.NoError(t, err, "claim %d is free once Close returns", i)
		require.NoError(t, o.Release())
	}
}

func TestRealSessionCancelledWaiterLeavesTheQueue(t *testing.T) {
	srv := startRealServer(t)
	c := newClient(t, srv.Addr, time.Second)
	holder := mustAcquire(t, c, "q")
	s := realSession(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	gone := sessionAcquireAsync(ctx, s, "q", false)
	require.Eventually(t, func() bool {
		for _, l := range srv.Locks() {
			if l.Name == "q" {
				return len(l.Waiters) == 1
			}
		}
		return false
	}, wait, 5*time.Millisecond)
	cancel()
	require.ErrorIs(t, result(t, gone).err, context.Canceled)
	require.Eventually(t, func() bool {
		for _, l := range srv.Locks() {
			if l.Name == "q" {
				return len(l.Waiters) == 0
			}
		}
		return false
	}, wait, 5*time.Millisecond, "the server must drop the cancelled stream")
	require.NoError(t, holder.Release())
	require.NoError(t, s.Err())
}

func TestRealSessionShutdownLosesEveryClaim(t *testing.T) {
	srv := startRealServer(t)
	s := realSession(t, newClient(t, srv.Addr, time.Second))
	a, err := s.Acquire(ctxTimeout(t, wait), "down/a")
	require.NoError(t, err)
	b, err := s.Acquire(ctxTimeout(t, wait), "down/b")
	require.NoError(t, err)
	require.NoError(t, srv.Shutdown(ctxTimeout(t, wait)))
	for _, l := range []*Lock{a, b} {
		lockDone(t, l)
		require.ErrorIs(t, l.Err(), ErrLockLost)
		require.ErrorIs(t, l.Err(), protocol.ErrShuttingDown)
	}
	receive(t, s.Done())
}

func TestRealPool(t *testing.T) {
	srv := startRealServer(t)
	pool, err := NewPool(newClient(t, srv.Addr, time.Second), 3)
	require.NoError(t, err)
	defer pool.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 30)
	for i := range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := pool.Acquire(ctxTimeout(t, wait), fmt.Sprintf("pool/%d", i%5))
			if err == nil {
				err = l.Release()
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// TestRealSessionWatchVouchedByHeartbeats: after its first WATCHING, a
// watch of a session stays known for leases on end through the session's
// ALIVEs alone, and follows the changes.
func TestRealSessionWatchVouchedByHeartbeats(t *testing.T) {
	srv := startRealServer(t)
	const lease = 500 * time.Millisecond
	c := newClient(t, srv.Addr, lease)
	s := realSession(t, c)
	w, err := s.Watch(ctxTimeout(t, wait), "watched")
	require.NoError(t, err)
	defer w.Close()
	first := w.State()
	require.True(t, first.Known)
	assert.Empty(t, first.Holders)

	holder := mustAcquire(t, c, "watched")
	require.Eventually(t, func() bool {
		st := w.State()
		return st.Known && len(st.Holders) == 1 && st.Holders[0].Token == holder.Token()
	}, wait, 5*time.Millisecond)
	time.Sleep(3 * lease)
	st := w.State()
	require.True(t, st.Known, "the session's heartbeats vouch for the watch")
	assert.True(t, st.ValidUntil.After(first.ValidUntil.Add(2*lease)), "its validity moves with the ALIVEs")
	require.NoError(t, holder.Release())
	require.Eventually(t, func() bool {
		st := w.State()
		return st.Known && len(st.Holders) == 0
	}, wait, 5*time.Millisecond)
	require.NoError(t, w.Err())
	w.Close()
	require.NoError(t, w.Err(), "Close is no error")
	// A round trip after the watch's RELEASE: the session took it well.
	l, err := s.Acquire(ctxTimeout(t, wait), "after-watch")
	require.NoError(t, err)
	require.NoError(t, l.Release())
	require.NoError(t, s.Err(), "a watch's close leaves the session")
}

func TestRealSessionWatchEndsWithTheSession(t *testing.T) {
	srv := startRealServer(t)
	proxy := newPartitionProxy(t, srv.Addr)
	const lease = 400 * time.Millisecond
	s := realSession(t, newClient(t, proxy.ln.Addr().String(), lease))
	w, err := s.Watch(ctxTimeout(t, wait), "cut")
	require.NoError(t, err)
	require.True(t, w.State().Known)
	proxy.partitioned.Store(true)
	receive(t, w.Done())
	st := w.State()
	assert.False(t, st.Known, "a watch whose session timed out vouches for nothing")
	require.ErrorIs(t, w.Err(), ErrClientTimeout)
}

func TestRealSessionElection(t *testing.T) {
	srv := startRealServer(t)
	c := newClient(t, srv.Addr, time.Second)
	candidate := realSession(t, c)
	follower := realSession(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	obs, err := follower.Observe(ctx, "election")
	require.NoError(t, err)
	o := receive(t, obs)
	assert.Equal(t, NoLeader, o.State)
	term, err := candidate.Campaign(ctxTimeout(t, wait), "election", []byte("10.0.0.1:80"))
	require.NoError(t, err)
	for o.State != Leading {
		o = receive(t, obs)
	}
	assert.Equal(t, term.Token(), o.Token)
	assert.Equal(t, []byte("10.0.0.1:80"), o.Value)
	require.NoError(t, term.Resign())
	for o.State == Leading {
		o = receive(t, obs)
	}
	assert.Equal(t, NoLeader, o.State)
}

// TestRealSessionTooManyStreams: one claim over the server's cap ends its
// stream with 0x05 (temporary), and the session lives on; a Pool then
// opens another session.
func TestRealSessionTooManyStreams(t *testing.T) {
	srv := testserver.Start(t, server.Config{MaxStreams: 2}, wait)
	c := newClient(t, srv.Addr, time.Second)
	s := realSession(t, c)
	require.Equal(t, 2, s.MaxStreams())
	a, err := s.Acquire(ctxTimeout(t, wait), "cap/a")
	require.NoError(t, err)
	_, err = s.Acquire(ctxTimeout(t, wait), "cap/b")
	require.NoError(t, err)
	_, err = s.Acquire(ctxTimeout(t, wait), "cap/c")
	require.ErrorIs(t, err, protocol.ErrTooManyStreams)
	var se *ServerError
	require.ErrorAs(t, err, &se)
	assert.True(t, se.Temporary())
	require.NoError(t, s.Err())
	require.NoError(t, a.Release())
	l, err := s.Acquire(ctxTimeout(t, wait), "cap/c")
	require.NoError(t, err, "a released stream makes room")
	require.NoError(t, l.Release())

	pool, err := NewPool(c, 2)
	require.NoError(t, err)
	defer pool.Close()
	var held []*Lock
	for i := range 4 {
		l, err := pool.Acquire(ctxTimeout(t, wait), fmt.Sprintf("cap/pool/%d", i))
		require.NoError(t, err, "claim %d", i)
		held = append(held, l)
	}
	_, err = pool.Acquire(ctxTimeout(t, wait), "cap/pool/full")
	require.Error(t, err, "2 sessions of 2 streams are full")
	for _, l := range held {
		require.NoError(t, l.Release())
	}
}
