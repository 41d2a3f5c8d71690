package server

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/leaserecord"
	"github.com/monolock/monolock/go/internal/tokenstore"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// countingObserver records the events a metrics observer would count.
type countingObserver struct {
	mu sync.Mutex
	observed
}

// observed is what countingObserver counted.
type observed struct {
	granted  int
	promoted []time.Duration
	expired  int
	errors   map[uint8]int
	refused  map[string]int
	heldBack map[string]int // by cause

	tokenFailures int
	bursts        int
}

func newCountingObserver() *countingObserver {
	return &countingObserver{observed: observed{errors: map[uint8]int{}, refused: map[string]int{}, heldBack: map[string]int{}}}
}

func (o *countingObserver) Granted() { o.mu.Lock(); o.granted++; o.mu.Unlock() }
func (o *countingObserver) Promoted(d time.Duration) {
	o.mu.Lock()
	o.promoted = append(o.promoted, d)
	o.mu.Unlock()
}
func (o *countingObserver) Expired()                { o.mu.Lock(); o.expired++; o.mu.Unlock() }
func (o *countingObserver) ErrorSent(code uint8)    { o.mu.Lock(); o.errors[code]++; o.mu.Unlock() }
func (o *countingObserver) Refused(r string)        { o.mu.Lock(); o.refused[r]++; o.mu.Unlock() }
func (o *countingObserver) HeartbeatBurst(n int)    { o.mu.Lock(); o.bursts += n; o.mu.Unlock() }
func (o *countingObserver) TokenReservationFailed() { o.mu.Lock(); o.tokenFailures++; o.mu.Unlock() }
func (o *countingObserver) HeldBack(cause string)   { o.mu.Lock(); o.heldBack[cause]++; o.mu.Unlock() }

func (o *countingObserver) snapshot() observed {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := observed{granted: o.granted, promoted: append([]time.Duration(nil), o.promoted...),
		expired: o.expired, errors: map[uint8]int{}, refused: map[string]int{}, heldBack: map[string]int{},
		tokenFailures: o.tokenFailures, bursts: o.bursts}
	for k, v := range o.heldBack {
		c.heldBack[k] = v
	}
	for k, v := range o.errors {
		c.errors[k] = v
	}
	for k, v := range o.refused {
		c.refused[k] = v
	}
	return c
}

// eventually polls cond until it holds or replyTimeout passes. Used only
// for server-internal bookkeeping that has no event to wait on.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(replyTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// dialFrom connects from a chosen loopback source address.
func dialFrom(t *testing.T, src, addr string) *client {
	t.Helper()
	d := net.Dialer{Timeout: replyTimeout, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr)
	require.NoError(t, err)
	tc := c.(*net.TCPConn)
	t.Cleanup(func() { tc.Close() })
	return &client{t: t, conn: tc}
}

// Over --max-sessions, a connection is closed before any reply, even one
// that has sent a complete ACQUIRE; a freed place is usable again.
func TestMaxSessionsClosesBeforeAnyReply(t *testing.T) {
	obs := newCountingObserver()
	srv := startServer(t, Config{MaxSessions: 2, Observer: obs})
	a, b := dial(t, srv.addr), dial(t, srv.addr)
	a.acquire("x", 60000)
	a.expectAcquired()
	b.acquire("y", 60000)
	b.expectAcquired()

	over := dial(t, srv.addr)
	over.acquire("z", 60000)
	over.expectClosed()
	assert.Equal(t, 1, obs.snapshot().refused[RefusedMaxSessions])

	a.conn.Close()
	eventually(t, "the closed session to end", func() bool { return srv.Sessions() == 1 })
	again := dial(t, srv.addr)
	again.acquire("z", 60000)
	again.expectAcquired()
}

// The per-address limit counts client IPs separately.
func TestMaxSessionsPerAddr(t *testing.T) {
	obs := newCountingObserver()
	srv := startServer(t, Config{MaxSessionsPerAddr: 1, Observer: obs})
	first := dialFrom(t, "127.0.0.1", srv.addr)
	first.acquire("x", 60000)
	first.expectAcquired()

	second := dialFrom(t, "127.0.0.1", srv.addr)
	second.acquire("x", 60000)
	second.expectClosed()
	assert.Equal(t, 1, obs.snapshot().refused[RefusedPerAddr])

	other := dialFrom(t, "127.0.0.2", srv.addr)
	other.acquire("x", 60000)
	other.expectWaiting()

	first.conn.Close()
	other.expectAcquired()
	eventually(t, "the closed session to end", func() bool { return srv.Sessions() == 1 })
	third := dialFrom(t, "127.0.0.1", srv.addr)
	third.acquire("y", 60000)
	third.expectAcquired()
}

// A holder that goes silent keeps its lock from the next waiter for the
// lock delay after its lease ran out; newcomers queue meanwhile.
func TestLockDelayAfterSilence(t *testing.T) {
	const lease, delay = 200 * time.Millisecond, 400 * time.Millisecond
	obs := newCountingObserver()
	srv := startServer(t, Config{LockDelay: delay, Observer: obs})
	holder := dial(t, srv.addr)
	start := time.Now()
	holder.acquire("res", uint32(lease.Milliseconds()))
	tok := holder.expectAcquired()
	waiter := dial(t, srv.addr)
	waiter.acquire("res", 60000)
	waiter.expectWaiting()

	holder.expectClosed() // lease ran out: closed without a message
	require.True(t, srv.Locks()[0].Blocked, "the lock is blocked during the delay")
	late := dial(t, srv.addr)
	late.acquire("res", 60000)
	late.expectWaiting()

	got := waiter.expectAcquired()
	elapsed := time.Since(start)
	assert.Equal(t, tok+1, got)
	assert.GreaterOrEqual(t, elapsed, lease+delay, "promoted before lease + lock delay")
	assert.Equal(t, []uint64{late.sessionID(t, srv)}, waitersOf(srv, "res"))

	// The observer hears of the promotion just after it is written.
	eventually(t, "the promotion to be observed", func() bool { return len(obs.snapshot().promoted) == 1 })
	s := obs.snapshot()
	assert.Equal(t, 1, s.expired)
	assert.Equal(t, map[string]int{HeldBackLockDelay: 1}, s.heldBack, "a silent holder is held back by the lock delay, not a reset")
	assert.GreaterOrEqual(t, s.promoted[0], delay, "handoff latency includes the lock delay")
}

// sessionID finds the session of c by its local address in the listing.
func (c *client) sessionID(t *testing.T, srv *testServer) uint64 {
	t.Helper()
	local := c.conn.LocalAddr().String()
	for _, l := range srv.LockListing() {
		if l.Holder != nil && l.Holder.Remote == local {
			return l.Holder.ID
		}
		for _, w := range l.Waiters {
			if w.Remote == local {
				return w.ID
			}
		}
	}
	t.Fatalf("no session from %s", local)
	return 0
}

// A clean close or a kick promotes at once, lock delay or not.
func TestLockDelayDoesNotDelayCleanCloseOrKick(t *testing.T) {
	srv := startServer(t, Config{LockDelay: time.Hour})
	a, b, c := dial(t, srv.addr), dial(t, srv.addr), dial(t, srv.addr)
	a.acquire("res", 60000)
	a.expectAcquired()
	b.acquire("res", 60000)
	b.expectWaiting()
	c.acquire("res", 60000)
	c.expectWaiting()

	a.conn.Close()
	b.expectAcquired()
	require.True(t, srv.Kick(holderOf(t, srv, "res")))
	b.expectError(protocol.ErrAdminClosed)
	c.expectAcquired()
}

// The listing names each session's address, identity and lease, holder
// first and waiters in queue order.
func TestLockListingDetails(t *testing.T) {
	obs := newCountingObserver()
	srv := startServer(t, Config{Observer: obs})
	a, b := dial(t, srv.addr), dial(t, srv.addr)
	a.acquire("res", 30000)
	tok := a.expectAcquired()
	b.acquire("res", 45000)
	b.expectWaiting()

	st := srv.LockListing()
	require.Len(t, st, 1)
	require.NotNil(t, st[0].Holder)
	h := st[0].Holder
	assert.Equal(t, a.conn.LocalAddr().String(), h.Remote)
	assert.Equal(t, "anonymous", h.Identity)
	assert.Equal(t, int64(30000), h.LeaseMS)
	assert.Equal(t, tok, h.Token)
	require.Len(t, st[0].Waiters, 1)
	assert.Equal(t, b.conn.LocalAddr().String(), st[0].Waiters[0].Remote)
	assert.Equal(t, int64(45000), st[0].Waiters[0].LeaseMS)
	assert.Zero(t, st[0].Waiters[0].Token)
	locks, holders, waiters := srv.Counts()
	assert.Equal(t, [3]int{1, 1, 1}, [3]int{locks, holders, waiters})
	assert.True(t, srv.Ready())

	// Errors are counted by code.
	bad := dial(t, srv.addr)
	bad.send([]byte{protocol.MsgHeartbeat})
	bad.expectError(protocol.ErrExpectedAcquire)
	eventually(t, "the error to be counted", func() bool { return obs.snapshot().errors[protocol.ErrExpectedAcquire.Code] == 1 })
	assert.Equal(t, 1, obs.snapshot().granted)
}

// The IPv6 prefix the per-address limit counts by is checked at New
// (how addresses are counted: package sessionlimit).
func TestPerAddrIPv6PrefixIsChecked(t *testing.T) {
	_, err := New(Config{DataDir: t.TempDir(), PerAddrIPv6Prefix: 129})
	require.ErrorContains(t, err, "must be 1 to 128")
}

// failingStore is a lease record's store whose writes fail while broken:
// a full or read-only disk.
type failingStore struct {
	broken atomic.Bool
}

func (f *failingStore) Load() (time.Duration, map[string]time.Duration, error) { return 0, nil, nil }
func (f *failingStore) WantsFull() bool                                        { return true }
func (f *failingStore) Close()                                                 {}
func (f *failingStore) Write(leaserecord.Change) error {
	if f.broken.Load() {
		return errors.New("no space left on device")
	}
	return nil
}

// recordGate is an HA gate that always leads, with the given record.
type recordGate struct{ rec *leaserecord.Record }

func (g recordGate) Active(time.Time) (bool, string) { return true, "" }
func (g recordGate) Leases() *leaserecord.Record     { return g.rec }
func (g recordGate) Status() CellStatus              { return CellStatus{Role: "leader"} }

// While the lease record cannot be written, claims that need a write are
// refused with 0x01, so the server is not ready (/readyz 503); once a
// write succeeds it is ready again.
func TestNotReadyWhileTheLeaseRecordCannotBeWritten(t *testing.T) {
	store := &failingStore{}
	rec, err := leaserecord.OpenStore(store, leaserecord.Options{LazyWrite: 20 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(rec.Close)
	tokens, err := tokenstore.New(0, func(uint64) error { return nil }, tokenstore.Options{})
	require.NoError(t, err)
	srv := startServer(t, Config{Gate: recordGate{rec}, Tokens: tokens})
	require.Eventually(t, srv.Server.Ready, replyTimeout, 10*time.Millisecond, "serving")

	store.broken.Store(true)
	c := dial(t, srv.addr)
	c.acquire("needs-a-write", 60000)
	c.expectError(protocol.ErrShuttingDown)
	assert.False(t, srv.Server.Ready(), "ready while every claim that needs a record write fails")

	store.broken.Store(false)
	require.Eventually(t, srv.Server.Ready, replyTimeout, 10*time.Millisecond, "the retried write succeeded")
}
