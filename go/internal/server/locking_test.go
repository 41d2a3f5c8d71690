package server

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// queue connects a holder and n waiters on name, in order, and returns them
// with the holder's token.
func queue(t *testing.T, srv *testServer, name string, n int) (*client, uint64, []*client) {
	t.Helper()
	holder := dial(t, srv.addr)
	holder.acquire(name, 60000)
	tok := holder.expectAcquired()
	waiters := make([]*client, n)
	for i := range waiters {
		waiters[i] = dial(t, srv.addr)
		waiters[i].acquire(name, 60000)
		// WAITING means the server has queued it: the next one queues behind.
		waiters[i].expectWaiting()
	}
	return holder, tok, waiters
}

func TestPromotionIsStrictlyFIFO(t *testing.T) {
	srv := startServer(t, Config{})
	holder, tok, waiters := queue(t, srv, "fifo", 5)
	prev := holder
	for i, w := range waiters {
		prev.conn.Close()
		got := w.expectAcquired()
		assert.Greater(t, got, tok, "waiter %d", i)
		tok = got
		for _, later := range waiters[i+1:] {
			later.expectSilence(20 * time.Millisecond)
		}
		prev = w
	}
}

func TestWaiterLeavingKeepsTheQueue(t *testing.T) {
	srv := startServer(t, Config{})
	holder, _, w := queue(t, srv, "leave", 4)
	before := waitersOf(srv, "leave")
	require.Len(t, before, 4)

	w[1].conn.Close() // from the middle
	w[3].conn.Close() // and the tail
	require.Eventually(t, func() bool { return len(waitersOf(srv, "leave")) == 2 },
		replyTimeout, time.Millisecond)
	assert.Equal(t, []uint64{before[0], before[2]}, waitersOf(srv, "leave"))
	w[0].expectSilence(20 * time.Millisecond)
	w[2].expectSilence(20 * time.Millisecond)

	holder.conn.Close()
	w[0].expectAcquired()
	w[2].expectSilence(20 * time.Millisecond)
	w[0].conn.Close()
	w[2].expectAcquired()
}

func TestPromotionIsImmediateAndUnsolicited(t *testing.T) {
	srv := startServer(t, Config{})
	// A long lease: if promotion waited for anything lease-related, the test
	// would time out.
	holder := dial(t, srv.addr)
	holder.acquire("now", 3_600_000)
	tok := holder.expectAcquired()
	waiter := dial(t, srv.addr)
	waiter.acquire("now", 3_600_000)
	waiter.expectWaiting()

	start := time.Now()
	holder.conn.Close()
	// The waiter sends nothing: the ACQUIRED comes on the server's initiative.
	got := waiter.expectAcquired()
	assert.Equal(t, tok+1, got)
	assert.Less(t, time.Since(start), 2*time.Second, "promotion on close, not on a timer")
	waiter.expectSilence(20 * time.Millisecond)
}

func TestHeartbeatReplies(t *testing.T) {
	srv := startServer(t, Config{})
	holder, tok, w := queue(t, srv, "hb", 1)
	for i := 0; i < 3; i++ {
		w[0].heartbeat()
		w[0].expectWaiting()
		holder.heartbeat()
		assert.Equal(t, tok, holder.expectAcquired(), "a heartbeat ack carries the grant's token")
	}
	holder.conn.Close()
	promoted := w[0].expectAcquired()
	for i := 0; i < 3; i++ {
		w[0].heartbeat()
		assert.Equal(t, promoted, w[0].expectAcquired())
	}
}

// A promotion racing with a heartbeat in flight: the waiter gets exactly two
// frames (the ack and the promotion) and never a WAITING after an ACQUIRED.
func TestPromotionWhileHeartbeatInFlight(t *testing.T) {
	srv := startServer(t, Config{})
	orders := map[string]int{}
	for i := 0; i < 40; i++ {
		name := fmt.Sprint("race-", i)
		holder, tok, w := queue(t, srv, name, 1)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); w[0].conn.Write([]byte{protocol.MsgHeartbeat}) }()
		go func() { defer wg.Done(); holder.conn.Close() }()
		wg.Wait()

		first, second := w[0].next(), w[0].next()
		require.Equal(t, protocol.MsgAcquired, second.Type,
			"run %d: after %v came %v: a WAITING must never follow the promotion", i, first, second)
		require.Equal(t, tok+1, second.Token)
		if first.Type == protocol.MsgAcquired {
			require.Equal(t, tok+1, first.Token)
		} else {
			require.Equal(t, protocol.MsgWaiting, first.Type, "run %d: got %v", i, first)
		}
		orders[protocol.MsgName(first.Type)+","+protocol.MsgName(second.Type)]++
		w[0].expectSilence(10 * time.Millisecond)
		w[0].conn.Close()
	}
	t.Logf("observed orders: %v", orders)
}

// Tokens come from one counter: +1 per grant across all names, promotions
// included, also across blocks of the high-water mark.
func TestTokensCountUpByOnePerGrant(t *testing.T) {
	srv := startServer(t, Config{tokenBlock: 3})
	var want uint64
	holders := map[string]*client{}
	for i := 0; i < 6; i++ {
		name := fmt.Sprint("t", i%3)
		if h := holders[name]; h != nil {
			w := dial(t, srv.addr)
			w.acquire(name, 60000)
			w.expectWaiting()
			h.conn.Close()
			want++
			assert.Equal(t, want, w.expectAcquired())
			holders[name] = w
			continue
		}
		c := dial(t, srv.addr)
		c.acquire(name, 60000)
		want++
		assert.Equal(t, want, c.expectAcquired(), "a free lock is granted at once, also at a block boundary")
		holders[name] = c
	}
}

func TestKick(t *testing.T) {
	srv := startServer(t, Config{})
	holder, tok, w := queue(t, srv, "kick", 2)
	assert.False(t, srv.Kick(987654), "unknown session")

	waiterID := waitersOf(srv, "kick")[1]
	require.True(t, srv.Kick(waiterID))
	f := w[1].expectError(protocol.ErrAdminClosed)
	assert.Equal(t, "closed by administrator", f.Reason)
	w[1].expectClosed()
	w[1].conn.Close()
	holder.expectSilence(20 * time.Millisecond)

	require.True(t, srv.Kick(holderOf(t, srv, "kick")))
	// The next waiter holds the lock by the time Kick returns.
	assert.Equal(t, waitersOf(srv, "kick"), []uint64(nil))
	assert.Equal(t, tok+1, w[0].expectAcquired())
	holder.expectError(protocol.ErrAdminClosed)
	holder.expectClosed()
	holder.conn.Close()

	// A session still in its handshake can be kicked too.
	before := newestSession(srv)
	idle := dial(t, srv.addr)
	require.Eventually(t, func() bool { return newestSession(srv) > before }, replyTimeout, time.Millisecond)
	idleID := newestSession(srv)
	require.True(t, srv.Kick(idleID))
	idle.expectError(protocol.ErrAdminClosed)
	idle.expectClosed()
}

// orderObserver records the order of errors sent and promotions.
type orderObserver struct {
	nopObserver
	mu     sync.Mutex
	events []string
}

func (o *orderObserver) add(e string)           { o.mu.Lock(); o.events = append(o.events, e); o.mu.Unlock() }
func (o *orderObserver) Promoted(time.Duration) { o.add("promoted") }
func (o *orderObserver) ErrorSent(code uint8)   { o.add(fmt.Sprintf("error 0x%02x", code)) }

// A kicked holder is told (its ERROR written) before the next waiter is
// granted the lock: the holder hears it has lost the lock first.
func TestKickTellsTheHolderBeforePromoting(t *testing.T) {
	obs := &orderObserver{}
	srv := startServer(t, Config{Observer: obs})
	holder, tok, w := queue(t, srv, "kick-order", 1)
	require.True(t, srv.Kick(holderOf(t, srv, "kick-order")))
	holder.expectError(protocol.ErrAdminClosed)
	assert.Equal(t, tok+1, w[0].expectAcquired())
	obs.mu.Lock()
	defer obs.mu.Unlock()
	assert.Equal(t, []string{"error 0x02", "promoted"}, obs.events)
}

// A peer that ignores its ERROR and keeps sending still receives the ERROR:
// the server drains instead of resetting the connection.
func TestErrorSurvivesPeerStillSending(t *testing.T) {
	srv := startServer(t, Config{})
	c := dial(t, srv.addr)
	c.acquire("noisy", 60000)
	c.expectAcquired()
	// A second ACQUIRE followed by bytes the server will never parse.
	c.send(append(acquireFrame(t, "noisy", 60000), make([]byte, 4096)...))
	c.expectError(protocol.ErrDuplicateAcquire)
	c.expectClosed()
}

// newestSession returns the highest live session id (0 if none).
func newestSession(srv *testServer) uint64 {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	var newest uint64
	for id := range srv.sessions {
		newest = max(newest, id)
	}
	return newest
}

// A client can release synchronously: half-close, then wait for the server's
// close. The server closes only after the lock is released and the next
// waiter promoted, so the lock is free (or passed on) once EOF arrives.
func TestHalfCloseGivesASynchronousRelease(t *testing.T) {
	srv := startServer(t, Config{})
	for i := 0; i < 20; i++ {
		holder := dial(t, srv.addr)
		holder.acquire("sync", 60000)
		tok := holder.expectAcquired()
		require.NoError(t, holder.conn.CloseWrite())
		holder.expectClosed()
		// No waiting, no polling: the lock is already free.
		next := dial(t, srv.addr)
		next.acquire("sync", 60000)
		assert.Equal(t, tok+1, next.expectAcquired())
		require.NoError(t, next.conn.CloseWrite())
		next.expectClosed()
	}
}

// A holder whose connection is reset (not closed with a FIN) keeps its lock
// until its lease would have run out: a reset may come from a middlebox or
// a rebooted host, and the holder may not know yet. A clean close still
// hands the lock over at once (TestKick, release tests).
func TestResetHolderKeepsTheLockForItsLease(t *testing.T) {
	srv := startServer(t, Config{})
	holder := dial(t, srv.addr)
	holder.acquire("reset", 1000)
	tok := holder.expectAcquired()
	waiter := dial(t, srv.addr)
	waiter.acquire("reset", 60000)
	waiter.expectWaiting()
	sent := time.Now()
	holder.heartbeat()
	require.Equal(t, tok, holder.expectAcquired())
	require.NoError(t, holder.conn.SetLinger(0))
	require.NoError(t, holder.conn.Close()) // a reset, not a FIN
	assert.Equal(t, tok+1, waiter.expectAcquired())
	assert.GreaterOrEqual(t, time.Since(sent), time.Second, "granted before the reset holder's lease ran out")
}

// Thousands of claims on fresh names, written before any reply is read,
// cross many token blocks (small ones, which the store grows as the
// grants outrun its writes): every one is granted at once, none is
// answered WAITING, and the tokens are one run without gaps or repeats.
func TestFreeLocksAreGrantedAtOnceAcrossTokenBlocks(t *testing.T) {
	const claims = 3000
	// Blocks of 50 double as the grants outrun them; the wait for a block
	// under way is generous here, since on a loaded machine (a whole CI
	// run on two cores) one fsync took over the production 250 ms. The old
	// store answered WAITING as soon as a block ran out, whatever the wait.
	srv := startServer(t, Config{tokenBlock: 50, tokenStarve: 10 * time.Second})
	conns := make([]*client, claims)
	for i := range conns {
		conns[i] = dial(t, srv.addr)
		conns[i].acquire(fmt.Sprintf("fresh/%d", i), 60000)
	}
	tokens := make(map[uint64]bool, claims)
	for i, c := range conns {
		f := c.next()
		require.Equal(t, protocol.MsgAcquired, f.Type, "claim %d on a free lock: got %v", i, f)
		require.False(t, tokens[f.Token], "token %d granted twice", f.Token)
		tokens[f.Token] = true
	}
	for tok := uint64(1); tok <= claims; tok++ {
		require.True(t, tokens[tok], "token %d missing: not one run from 1", tok)
	}
}

// Both holders of a semaphore of 2 reset: they keep their permits for
// their leases, and their limit too, so a claim that says 3 is refused
// with 0x1a instead of becoming a third holder of a name agreed at 2.
func TestResetSemaphoreHoldersKeepTheirLimit(t *testing.T) {
	srv := startServer(t, Config{})
	frame, err := protocol.AppendAcquireV2(nil, "pool", 30000, protocol.ModeShared, 2)
	require.NoError(t, err)
	for range 2 {
		h := dial(t, srv.addr)
		h.send(frame)
		h.expectAcquired()
		require.NoError(t, h.conn.SetLinger(0))
		require.NoError(t, h.conn.Close()) // a reset, not a FIN
	}
	require.Eventually(t, func() bool { return srv.Server.Sessions() == 0 }, replyTimeout, 5*time.Millisecond)
	three, err := protocol.AppendAcquireV2(nil, "pool", 30000, protocol.ModeShared, 3)
	require.NoError(t, err)
	c := dial(t, srv.addr)
	c.send(three)
	c.expectError(protocol.ErrLimitMismatch)
	two := dial(t, srv.addr)
	two.send(frame)
	two.expectWaiting()
}
