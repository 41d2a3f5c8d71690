package client

// Heartbeats while holding: their timing against acknowledgements and
// round trips, the loss when the server goes silent, and promotions that
// arrive while a heartbeat is in flight.

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHeartbeatsWithPromptAcks(t *testing.T) {
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), 800*time.Millisecond) // base interval 200 ms
	lock, conn, prev := grant(t, srv, c, "hb", 3)
	for i := 0; i < 5; i++ {
		at := conn.expectHeartbeat()
		gap := at.Sub(prev)
		// base - 2*srtt on loopback: a little under 200 ms.
		assert.GreaterOrEqual(t, gap, 150*time.Millisecond, "heartbeat %d", i)
		assert.LessOrEqual(t, gap, 500*time.Millisecond, "heartbeat %d", i)
		conn.send(acquired(3))
		prev = at
	}
	require.NoError(t, lock.Err())
}

// TestHeartbeatIntervalUnderInjectedRTT delays every reply by 30 ms: the
// smoothed RTT grows to about 30 ms and the interval shrinks to about
// 100 - 2*30 = 40 ms. Only one heartbeat may be in flight: the fake server
// checks that nothing arrives while it holds an ack back.
func TestHeartbeatIntervalUnderInjectedRTT(t *testing.T) {
	const rtt = 30 * time.Millisecond
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), 400*time.Millisecond)
	res := acquireAsync(context.Background(), c, "rtt", false)
	conn := srv.accept()
	prev := conn.expectAcquire("rtt", 400*time.Millisecond)
	conn.quiet(rtt)
	conn.send(acquired(5))
	r := result(t, res)
	require.NoError(t, r.err)
	defer r.lock.Release()

	var total time.Duration
	const n = 8
	for i := 0; i < n; i++ {
		at := conn.expectHeartbeat()
		gap := at.Sub(prev)
		assert.GreaterOrEqual(t, gap, rtt, "heartbeat %d came before the previous ack", i)
		total += gap
		prev = at
		conn.quiet(rtt) // one heartbeat in flight: nothing may arrive now
		conn.send(acquired(5))
	}
	mean := total / n
	assert.Less(t, mean, 75*time.Millisecond, "interval must shrink well below the 100 ms base")
	require.NoError(t, r.lock.Err())
}

// TestSlowLinkHeartbeatFollowsAck: with 2*srtt above the base interval the
// interval clamps to 1 ms, so each heartbeat goes out right after the ack of
// the previous one, and never before it.
func TestSlowLinkHeartbeatFollowsAck(t *testing.T) {
	// base 250 ms, 2 x 150 ms above it; 500 ms of slack to the 800 ms timeout.
	const rtt = 150 * time.Millisecond
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), time.Second)
	res := acquireAsync(context.Background(), c, "slow", false)
	conn := srv.accept()
	conn.expectAcquire("slow", time.Second)
	conn.quiet(rtt)
	conn.send(acquired(6))
	r := result(t, res)
	require.NoError(t, r.err)
	defer r.lock.Release()
	for i := 0; i < 4; i++ {
		conn.expectHeartbeat()
		conn.quiet(rtt)
		sent := time.Now()
		conn.send(acquired(6))
		if i > 0 { // the first heartbeat's timing came from one sample only
			next := conn.expectHeartbeat()
			assert.Less(t, next.Sub(sent), 100*time.Millisecond, "heartbeat %d should follow its ack at once", i)
			conn.quiet(rtt)
			conn.send(acquired(6))
		}
	}
	require.NoError(t, r.lock.Err())
}

// TestLostWhenServerGoesSilent: the lock is lost at the send of the last
// acknowledged heartbeat + 0.8 x lease, never later: Err reports it from
// ValidUntil on, Done closes soon after, and the client closes the socket.
func TestLostWhenServerGoesSilent(t *testing.T) {
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), 400*time.Millisecond) // client timeout 320 ms
	lock, conn, _ := grant(t, srv, c, "silent", 11)
	var lastAcked time.Time
	for i := 0; i < 2; i++ {
		lastAcked = conn.expectHeartbeat()
		conn.send(acquired(11))
	}
	// The next heartbeat is only sent once the last ack was processed, so
	// from here on ValidUntil no longer moves. It stays unanswered.
	conn.expectHeartbeat()
	vu := lock.ValidUntil()
	require.False(t, vu.After(lastAcked.Add(320*time.Millisecond)),
		"valid until is %v past arrival of the last acked heartbeat", vu.Sub(lastAcked))
	require.NoError(t, lock.Err())

	time.Sleep(time.Until(vu))
	err := lock.Err()
	require.ErrorIs(t, err, ErrLockLost, "Err must report the loss from ValidUntil on")
	require.ErrorIs(t, err, ErrClientTimeout)
	// The same words in every client: the timeout and the lease it comes from.
	assert.Equal(t, "monolock: lock lost: no reply from the server within 320 ms (0.8 x lease of 400 ms)", err.Error())

	done := lockDone(t, lock)
	assert.Less(t, done.Sub(vu), 300*time.Millisecond, "Done closed long after ValidUntil")
	conn.expectClosed()
	require.ErrorIs(t, lock.Err(), ErrClientTimeout)
	srv.noConnection(200 * time.Millisecond) // never re-acquired behind our back
}

// TestPromotionDuringInFlightHeartbeat: the server promotes while a
// heartbeat is in flight. The promotion is not that heartbeat's ack, so the
// validity still runs from the ACQUIRE; the ack that follows moves it.
func TestPromotionDuringInFlightHeartbeat(t *testing.T) {
	srv := newFakeServer(t)
	var waits atomic.Int32
	c := newClient(t, srv.addr(), time.Second, WithOnWaiting(func(string) { waits.Add(1) }))
	res := acquireAsync(context.Background(), c, "promo", false)
	conn := srv.accept()
	tA := conn.expectAcquire("promo", time.Second)
	conn.send(waiting())
	conn.expectHeartbeat()
	conn.send(acquired(7)) // promotion
	r := result(t, res)
	require.NoError(t, r.err)
	lock := r.lock
	defer lock.Release()
	require.Equal(t, int32(1), waits.Load())
	require.Equal(t, uint64(7), lock.Token())
	vuPromo := lock.ValidUntil()
	require.False(t, vuPromo.After(tA.Add(800*time.Millisecond)), "promotion taken as the heartbeat's ack")

	conn.quiet(20 * time.Millisecond) // still in flight: no second heartbeat
	conn.send(acquired(7))            // the heartbeat's ack
	conn.expectHeartbeat()
	vuAck := lock.ValidUntil()
	assert.Greater(t, vuAck.Sub(vuPromo), 100*time.Millisecond, "the ack must move the deadline to the heartbeat's send")
	conn.send(acquired(7))
	require.NoError(t, lock.Err())
}

// TestPromotionIsNotAnAck: after a promotion during an in-flight heartbeat,
// the server never acks that heartbeat. The lock must expire from the
// ACQUIRE's send, not from the heartbeat's.
func TestPromotionIsNotAnAck(t *testing.T) {
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), 400*time.Millisecond)
	res := acquireAsync(context.Background(), c, "promo2", false)
	conn := srv.accept()
	tA := conn.expectAcquire("promo2", 400*time.Millisecond)
	conn.send(waiting())
	conn.expectHeartbeat()
	conn.send(acquired(8))
	r := result(t, res)
	require.NoError(t, r.err)
	lock := r.lock
	vu := lock.ValidUntil()
	require.False(t, vu.After(tA.Add(320*time.Millisecond)))
	done := lockDone(t, lock)
	require.False(t, done.Before(vu))
	require.ErrorIs(t, lock.Err(), ErrClientTimeout)
	conn.expectClosed()
}

// TestAckThenPromotionInOneRead: WAITING (the heartbeat's ack) and the
// promotion arrive in one segment; then heartbeats go on as a holder.
func TestAckThenPromotionInOneRead(t *testing.T) {
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), time.Second)
	res := acquireAsync(context.Background(), c, "both", false)
	conn := srv.accept()
	conn.expectAcquire("both", time.Second)
	conn.send(waiting())
	hb := conn.expectHeartbeat()
	conn.send(waiting(), acquired(12))
	r := result(t, res)
	require.NoError(t, r.err)
	defer r.lock.Release()
	// The ack came with the promotion, so validity runs from the heartbeat.
	vu := r.lock.ValidUntil()
	require.False(t, vu.After(hb.Add(800*time.Millisecond)))
	require.True(t, vu.After(hb.Add(600*time.Millisecond)), "validity should run from the acked heartbeat")
	conn.expectHeartbeat()
	conn.send(acquired(12))
	require.NoError(t, r.lock.Err())
}
