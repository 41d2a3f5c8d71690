package server

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// closedAfter waits for the server to close c without sending anything and
// returns how long after start that happened.
func closedAfter(t *testing.T, c *client, start time.Time) time.Duration {
	t.Helper()
	c.expectClosed()
	return time.Since(start)
}

func TestSilentHolderExpiresAndWaiterIsPromoted(t *testing.T) {
	srv := startServer(t, Config{})
	const lease = 300 * time.Millisecond
	holder := dial(t, srv.addr)
	start := time.Now() // before the send: the server's lastSeenAt is later
	holder.acquire("expire", uint32(lease.Milliseconds()))
	tok := holder.expectAcquired()
	waiter := dial(t, srv.addr)
	waiter.acquire("expire", 60000)
	waiter.expectWaiting()

	elapsed := closedAfter(t, holder, start)
	assert.GreaterOrEqual(t, elapsed, lease, "never dropped before its lease")
	assert.Less(t, elapsed, lease+5*time.Second)
	assert.Equal(t, tok+1, waiter.expectAcquired(), "released at once on expiry")
}

func TestHeartbeatsKeepASessionAlive(t *testing.T) {
	srv := startServer(t, Config{})
	const lease = 400 * time.Millisecond
	c := dial(t, srv.addr)
	c.acquire("alive", uint32(lease.Milliseconds()))
	tok := c.expectAcquired()
	// Five leases' worth of time, a heartbeat every quarter lease.
	for deadline := time.Now().Add(5 * lease); time.Now().Before(deadline); {
		time.Sleep(lease / 4)
		c.heartbeat()
		assert.Equal(t, tok, c.expectAcquired())
	}
	start := time.Now()
	c.expectClosed() // silence: the lease runs from the last heartbeat
	assert.Less(t, time.Since(start), lease+5*time.Second)
}

func TestSilentWaiterExpiresWithoutDisturbingTheQueue(t *testing.T) {
	srv := startServer(t, Config{})
	holder := dial(t, srv.addr)
	holder.acquire("wexp", 60000)
	tok := holder.expectAcquired()
	short := dial(t, srv.addr)
	start := time.Now()
	short.acquire("wexp", 200)
	short.expectWaiting()
	long := dial(t, srv.addr)
	long.acquire("wexp", 60000)
	long.expectWaiting()

	assert.GreaterOrEqual(t, closedAfter(t, short, start), 200*time.Millisecond)
	require.Eventually(t, func() bool { return len(waitersOf(srv, "wexp")) == 1 },
		replyTimeout, time.Millisecond)
	long.expectSilence(20 * time.Millisecond)
	holder.conn.Close()
	assert.Equal(t, tok+1, long.expectAcquired(), "the expired waiter took no token")
}

func TestHandshakeTimeout(t *testing.T) {
	const timeout = 250 * time.Millisecond
	srv := startServer(t, Config{HandshakeTimeout: timeout})

	// Before the first dial: the server may start a connection's clock
	// as soon as it accepts it, which can precede dial's return.
	start := time.Now()
	silent := dial(t, srv.addr)
	partial := dial(t, srv.addr)
	partial.send(acquireFrame(t, "hs", 60000)[:5])
	prompt := dial(t, srv.addr)
	prompt.acquire("hs", 60000)
	tok := prompt.expectAcquired()

	for _, c := range []*client{silent, partial} {
		elapsed := closedAfter(t, c, start)
		assert.GreaterOrEqual(t, elapsed, timeout)
		assert.Less(t, elapsed, timeout+5*time.Second)
	}
	// The timeout ends with the ACQUIRE: the lease governs from then on.
	prompt.expectSilence(2 * timeout)
	prompt.heartbeat()
	assert.Equal(t, tok, prompt.expectAcquired())
}

func TestShutdownSendsShuttingDownToEverySessionAndPromotesNobody(t *testing.T) {
	srv, err := New(Config{DataDir: t.TempDir()})
	require.NoError(t, err)
	addr, served := serveLoopback(t, srv, nil)
	ts := &testServer{Server: srv, addr: addr}

	holder, _, waiters := queue(t, ts, "bye", 3)
	other := dial(t, ts.addr)
	other.acquire("other", 60000)
	other.expectAcquired()
	idle := dial(t, ts.addr) // no ACQUIRE yet
	require.Eventually(t, func() bool { return srv.Sessions() == 6 }, replyTimeout, time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	shutdownDone := make(chan error, 1)
	go func() { shutdownDone <- srv.Shutdown(ctx) }()

	for _, c := range append([]*client{holder, other, idle}, waiters...) {
		// 0x01 is the first and only thing each session gets: no promotion.
		f := c.expectError(protocol.ErrShuttingDown)
		assert.Equal(t, "server shutting down", f.Reason)
		c.expectClosed()
		c.conn.Close()
	}
	require.NoError(t, <-shutdownDone)
	require.NoError(t, <-served, "Serve returns nil after Shutdown")
	require.NoError(t, srv.Shutdown(ctx), "idempotent")
	assert.Zero(t, srv.Sessions())

	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	assert.NoError(t, srv.Serve(ln2), "Serve after Shutdown returns at once")
}

// A peer that never reads nor closes cannot hold up Shutdown beyond its context.
func TestShutdownHonoursContext(t *testing.T) {
	srv, err := New(Config{DataDir: t.TempDir()})
	require.NoError(t, err)
	addr, served := serveLoopback(t, srv, nil)
	c := dial(t, addr)
	c.acquire("stuck", 60000)
	c.expectAcquired()
	// c neither reads on nor closes: the server lingers to drain it.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = srv.Shutdown(ctx)
	if err != nil { // on a fast machine the linger may not even be needed
		assert.ErrorIs(t, err, context.DeadlineExceeded)
	}
	assert.Less(t, time.Since(start), 5*time.Second)
	require.NoError(t, <-served)
	require.NoError(t, srv.Shutdown(context.Background()), "a second call waits for the rest")
}

func TestConfigValidation(t *testing.T) {
	_, err := New(Config{})
	assert.Error(t, err, "a data directory is required")
	_, err = New(Config{DataDir: t.TempDir(), HandshakeTimeout: -time.Second})
	assert.Error(t, err)

	dir := t.TempDir()
	srv, err := New(Config{DataDir: dir})
	require.NoError(t, err)
	assert.Equal(t, DefaultHandshakeTimeout, srv.handshakeTimeout)
	_, err = New(Config{DataDir: dir})
	assert.ErrorContains(t, err, "in use by another server")
	require.NoError(t, srv.Shutdown(context.Background()))
}

// When the high-water mark cannot be written, no token is handed out, and
// nobody is dropped either: waiters stay queued (their heartbeats answered
// WAITING), /readyz says not ready, the store retries once per interval, and
// once the disk is back the lock goes to the waiters in arrival order.
func TestTokenStoreFailureKeepsWaitersQueued(t *testing.T) {
	obs := newCountingObserver()
	srv := startServer(t, Config{tokenBlock: 2, tokenRetry: 50 * time.Millisecond, Observer: obs})
	holder, tok, w := queue(t, srv, "disk", 2)
	assert.Equal(t, uint64(1), tok)
	require.NoError(t, os.RemoveAll(srv.dir)) // every reservation from now on fails
	broken := time.Now()

	holder.conn.Close()
	assert.Equal(t, uint64(2), w[0].expectAcquired(), "the block's last token")
	w[0].conn.Close() // the next promotion needs a new block: none can be made
	w[1].expectSilence(200 * time.Millisecond)
	w[1].heartbeat()
	w[1].expectWaiting()
	late := dial(t, srv.addr)
	late.acquire("disk", 60000)
	late.expectWaiting()
	assert.False(t, srv.Ready(), "/readyz must say the server cannot grant")
	time.Sleep(300 * time.Millisecond)
	failures := obs.snapshot().tokenFailures
	most := int(time.Since(broken)/(50*time.Millisecond)) + 1
	assert.GreaterOrEqual(t, failures, 2, "the store retries")
	assert.LessOrEqual(t, failures, most, "one attempt per interval, not one per caller")

	require.NoError(t, os.MkdirAll(srv.dir, 0o700)) // the disk is back
	assert.Equal(t, uint64(3), w[1].expectAcquired(), "the first waiter, first")
	assert.True(t, srv.Ready())
	w[1].conn.Close()
	assert.Equal(t, uint64(4), late.expectAcquired())
}
