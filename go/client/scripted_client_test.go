package client

import (
	"context"
	"encoding/hex"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/testspec"
	"github.com/monolock/monolock/go/pkg/protocol"
)

func TestValidationBeforeAnyByte(t *testing.T) {
	var vec struct {
		ClientInvalid []struct {
			Desc    string `json:"desc"`
			NameHex string `json:"name_hex"`
			LeaseMS int64  `json:"lease_ms"`
			Code    uint8  `json:"code"`
		} `json:"client_invalid"`
	}
	testspec.Load(t, "vectors/frames.json", &vec)
	require.NotEmpty(t, vec.ClientInvalid)
	srv := newFakeServer(t)
	for _, v := range vec.ClientInvalid {
		t.Run(v.Desc, func(t *testing.T) {
			name, err := hex.DecodeString(v.NameHex)
			require.NoError(t, err)
			want := protocol.CodeErr(v.Code)
			require.NotNil(t, want)

			c, err := New(WithServers(srv.addr()), WithLease(time.Duration(v.LeaseMS)*time.Millisecond))
			if err == nil {
				for _, try := range []bool{false, true} {
					var lock *Lock
					if try {
						lock, err = c.TryAcquire(context.Background(), string(name))
					} else {
						lock, err = c.Acquire(context.Background(), string(name))
					}
					require.Nil(t, lock)
					requireCanonical(t, err, want)
				}
				return
			}
			requireCanonical(t, err, want)
		})
	}
	srv.noConnection(100 * time.Millisecond)
}

// requireCanonical checks that err is the canonical protocol error itself,
// with the code and the (terminal) class the server would have sent.
func requireCanonical(t *testing.T, err error, want *protocol.Error) {
	t.Helper()
	require.ErrorIs(t, err, want)
	var pe *protocol.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, want.Code, pe.Code)
	require.False(t, pe.Temporary())
}

func TestLeaseMustBeWholeMilliseconds(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second, time.Millisecond / 2, 1500 * time.Microsecond, (1 << 32) * time.Millisecond} {
		_, err := New(WithLease(d))
		require.ErrorIs(t, err, protocol.ErrInvalidLease, "lease %v", d)
	}
	for _, d := range []time.Duration{time.Millisecond, time.Hour, (1<<32 - 1) * time.Millisecond} {
		c, err := New(WithLease(d))
		require.NoError(t, err, "lease %v", d)
		require.Equal(t, d, c.Lease())
	}
}

func TestOptionErrors(t *testing.T) {
	for _, o := range []Option{WithServers(), WithServers("a:1", ""), WithDialTimeout(0)} {
		_, err := New(o)
		require.Error(t, err)
	}
	c, err := New()
	require.NoError(t, err)
	require.Equal(t, DefaultLease, c.Lease())
	require.Equal(t, []string{DefaultServer}, c.cfg.servers)
}

func TestAcquireFramesMatchVectors(t *testing.T) {
	var vec struct {
		ClientValid []struct {
			Desc    string `json:"desc"`
			Type    string `json:"type"`
			Name    string `json:"name"`
			LeaseMS int64  `json:"lease_ms"`
			Hex     string `json:"hex"`
		} `json:"client_valid"`
	}
	testspec.Load(t, "vectors/frames.json", &vec)
	srv := newFakeServer(t)
	seen := 0
	for _, v := range vec.ClientValid {
		if v.Type != "ACQUIRE" {
			continue
		}
		seen++
		t.Run(v.Desc, func(t *testing.T) {
			want, err := hex.DecodeString(v.Hex)
			require.NoError(t, err)
			c := newClient(t, srv.addr(), time.Duration(v.LeaseMS)*time.Millisecond)
			res := acquireAsync(context.Background(), c, v.Name, true)
			conn := srv.accept()
			conn.expect(want)
			conn.send(waiting())
			// A 1 ms lease may time out before WAITING arrives; either way
			// nothing is held.
			r := result(t, res)
			require.Nil(t, r.lock)
			require.Error(t, r.err)
		})
	}
	require.Greater(t, seen, 3)
}

func TestGrantAtOnce(t *testing.T) {
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), 2*time.Second)
	start := time.Now()
	res := acquireAsync(context.Background(), c, "jobs/x", false)
	conn := srv.accept()
	tA := conn.expectAcquire("jobs/x", 2*time.Second)
	conn.send(acquired(9007199254740993))
	r := result(t, res)
	require.NoError(t, r.err)
	lock := r.lock
	require.Equal(t, "jobs/x", lock.Name())
	require.Equal(t, uint64(9007199254740993), lock.Token())
	require.NoError(t, lock.Err())
	// Valid from the ACQUIRE's send (between start and its arrival) + 0.8 x lease.
	vu := lock.ValidUntil()
	require.False(t, vu.Before(start.Add(1600*time.Millisecond)), "valid until %v too early", vu.Sub(start))
	require.False(t, vu.After(tA.Add(1600*time.Millisecond)), "valid until %v after arrival+timeout", vu.Sub(tA))
	select {
	case <-lock.Done():
		t.Fatal("Done closed while held")
	default:
	}

	require.NoError(t, lock.Release())
	conn.expectClosed()
	require.ErrorIs(t, lock.Err(), ErrReleased)
	require.NotErrorIs(t, lock.Err(), ErrLockLost)
	lockDone(t, lock)
	require.NoError(t, lock.Release(), "Release is idempotent")
	require.Equal(t, vu, lock.ValidUntil(), "validity stays where it was")
}

func TestLargestToken(t *testing.T) {
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), 2*time.Second)
	res := acquireAsync(context.Background(), c, "t", false)
	conn := srv.accept()
	conn.expectAcquire("t", 2*time.Second)
	conn.send(acquired(1<<64 - 1))
	r := result(t, res)
	require.NoError(t, r.err)
	require.Equal(t, uint64(1<<64-1), r.lock.Token())
	require.NoError(t, r.lock.Release())
}

// grant runs the fake side of an immediate grant and returns the lock, the
// connection and the arrival time of the ACQUIRE.
func grant(t *testing.T, srv *fakeServer, c *Client, name string, token uint64) (*Lock, *fakeConn, time.Time) {
	t.Helper()
	res := acquireAsync(context.Background(), c, name, false)
	conn := srv.accept()
	tA := conn.expectAcquire(name, c.Lease())
	conn.send(acquired(token))
	r := result(t, res)
	require.NoError(t, r.err)
	t.Cleanup(func() { r.lock.Release() })
	return r.lock, conn, tA
}

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

func TestSplitFrames(t *testing.T) {
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), 400*time.Millisecond)
	res := acquireAsync(context.Background(), c, "split", false)
	conn := srv.accept()
	conn.expectAcquire("split", 400*time.Millisecond)
	conn.sendSplit(acquired(0x0102030405060708), 2*time.Millisecond)
	r := result(t, res)
	require.NoError(t, r.err)
	require.Equal(t, uint64(0x0102030405060708), r.lock.Token())
	conn.expectHeartbeat()
	conn.sendSplit(acquired(0x0102030405060708), time.Millisecond)
	conn.expectHeartbeat()
	conn.sendSplit(errFrame(0x02, "geschlossen – Wartung"), time.Millisecond)
	lockDone(t, r.lock)
	var se *ServerError
	require.ErrorAs(t, r.lock.Err(), &se)
	require.Equal(t, uint8(0x02), se.Code)
	require.Equal(t, "geschlossen – Wartung", se.Reason)
}

type codeCase struct {
	code      uint8
	temporary bool
}

// allCodes lists every code of spec/errors.json and its unknown examples.
func allCodes(t *testing.T) []codeCase {
	var spec struct {
		Errors []struct {
			Code      uint8 `json:"code"`
			Temporary bool  `json:"temporary"`
		} `json:"errors"`
		Unknown []struct {
			Code      uint8 `json:"code"`
			Temporary bool  `json:"temporary"`
		} `json:"unknown_code_examples"`
	}
	testspec.Load(t, "errors.json", &spec)
	var out []codeCase
	for _, e := range spec.Errors {
		out = append(out, codeCase{e.Code, e.Temporary})
	}
	for _, e := range spec.Unknown {
		out = append(out, codeCase{e.Code, e.Temporary})
	}
	require.Greater(t, len(out), 12)
	return out
}

func requireServerError(t *testing.T, err error, cc codeCase, reason string) {
	t.Helper()
	var se *ServerError
	require.ErrorAs(t, err, &se)
	require.Equal(t, cc.code, se.Code)
	require.Equal(t, reason, se.Reason)
	require.Equal(t, cc.temporary, se.Temporary())
	if canonical := protocol.CodeErr(cc.code); canonical != nil {
		require.ErrorIs(t, err, canonical)
	}
	require.Contains(t, se.Error(), "0x")
}

func TestServerErrorMatchesSpec(t *testing.T) {
	for _, cc := range allCodes(t) {
		se := &ServerError{Code: cc.code}
		require.Equal(t, cc.temporary, se.Temporary(), "code 0x%02x", cc.code)
		if canonical := protocol.CodeErr(cc.code); canonical != nil {
			require.ErrorIs(t, se, canonical)
		}
		if cc.code != protocol.ErrNotAuthorized.Code {
			require.NotErrorIs(t, se, protocol.ErrNotAuthorized, "code 0x%02x", cc.code)
		}
		require.ErrorIs(t, error(&ServerError{Code: cc.code, Reason: "x"}), &ServerError{Code: cc.code})
	}
}

func TestErrorWhileTrying(t *testing.T) {
	srv := newFakeServer(t)
	for _, cc := range allCodes(t) {
		c := newClient(t, srv.addr(), 10*time.Second)
		res := acquireAsync(context.Background(), c, "err", true)
		conn := srv.accept()
		conn.expectAcquire("err", 10*time.Second)
		conn.send(errFrame(cc.code, "why"))
		r := result(t, res)
		require.Nil(t, r.lock)
		requireServerError(t, r.err, cc, "why")
		conn.expectClosed()
	}
	srv.noConnection(100 * time.Millisecond) // try never retries
}

func TestErrorWhileHolding(t *testing.T) {
	srv := newFakeServer(t)
	for _, cc := range allCodes(t) {
		c := newClient(t, srv.addr(), 10*time.Second)
		lock, conn, _ := grant(t, srv, c, "held", 1)
		conn.send(errFrame(cc.code, ""))
		lockDone(t, lock)
		require.ErrorIs(t, lock.Err(), ErrLockLost)
		requireServerError(t, lock.Err(), cc, "")
		conn.expectClosed()
	}
	srv.noConnection(200 * time.Millisecond) // a lost lock is never re-acquired
}

func TestErrorWhileWaiting(t *testing.T) {
	srv := newFakeServer(t)
	for _, cc := range allCodes(t) {
		var waits atomic.Int32
		c := newClient(t, srv.addr(), 10*time.Second, WithOnWaiting(func(string) { waits.Add(1) }))
		res := acquireAsync(ctxTimeout(t, wait), c, "queue", false)
		conn := srv.accept()
		conn.expectAcquire("queue", 10*time.Second)
		conn.send(waiting())
		conn.send(errFrame(cc.code, "r"))
		conn.expectClosed()
		if !cc.temporary {
			r := result(t, res)
			requireServerError(t, r.err, cc, "r")
			require.Equal(t, int32(1), waits.Load())
			continue
		}
		// Temporary: a new connection, a new place in the queue.
		again := srv.accept()
		again.expectAcquire("queue", 10*time.Second)
		again.send(waiting(), acquired(99))
		r := result(t, res)
		require.NoError(t, r.err, "code 0x%02x", cc.code)
		require.Equal(t, int32(2), waits.Load())
		require.NoError(t, r.lock.Release())
		again.expectClosed()
	}
	srv.noConnection(100 * time.Millisecond)
}

func TestTryAcquireBusy(t *testing.T) {
	srv := newFakeServer(t)
	var waits atomic.Int32
	c := newClient(t, srv.addr(), time.Second, WithOnWaiting(func(string) { waits.Add(1) }))
	res := acquireAsync(context.Background(), c, "busy", true)
	conn := srv.accept()
	conn.expectAcquire("busy", time.Second)
	conn.send(waiting())
	r := result(t, res)
	require.ErrorIs(t, r.err, ErrBusy)
	require.Nil(t, r.lock)
	conn.expectClosed()
	require.Zero(t, waits.Load())
}

func TestCancelWhileWaitingClosesAtOnce(t *testing.T) {
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), 10*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := acquireAsync(ctx, c, "cancel", false)
	conn := srv.accept()
	conn.expectAcquire("cancel", 10*time.Second)
	conn.send(waiting())
	conn.quiet(50 * time.Millisecond)
	cancel()
	r := result(t, res)
	require.ErrorIs(t, r.err, context.Canceled)
	closed := conn.expectClosed()
	assert.Less(t, closed.Sub(r.at), time.Second)
}

func TestDeadlineWhileWaiting(t *testing.T) {
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), 10*time.Second)
	start := time.Now()
	res := acquireAsync(ctxTimeout(t, 300*time.Millisecond), c, "deadline", false)
	conn := srv.accept()
	conn.expectAcquire("deadline", 10*time.Second)
	conn.send(waiting())
	r := result(t, res)
	require.ErrorIs(t, r.err, context.DeadlineExceeded)
	assert.Less(t, r.at.Sub(start), 2*time.Second)
	conn.expectClosed()
}

// closedAddr returns a loopback address with nothing listening.
func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestUnreachable(t *testing.T) {
	c := newClient(t, closedAddr(t), time.Second)
	_, err := c.TryAcquire(context.Background(), "x")
	require.ErrorIs(t, err, ErrUnavailable)

	start := time.Now()
	_, err = c.Acquire(ctxTimeout(t, 400*time.Millisecond), "x")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, ErrUnavailable, "the last attempt's cause is kept")
	took := time.Since(start)
	assert.GreaterOrEqual(t, took, 400*time.Millisecond)
	assert.Less(t, took, 2*time.Second, "the backoff must not sleep past the deadline")
}

func TestServerListFallsThrough(t *testing.T) {
	srv := newFakeServer(t)
	c, err := New(WithServers(closedAddr(t), srv.addr()), WithLease(time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { requireNoSessions(t) })
	lock, _, _ := grant(t, srv, c, "list", 4)
	require.Equal(t, uint64(4), lock.Token())
	require.NoError(t, lock.Release())
}

// TestWaitingDeadConnectionRequeues: a queued session whose server goes
// silent is given up after the client timeout and queued again.
func TestWaitingDeadConnectionRequeues(t *testing.T) {
	srv := newFakeServer(t)
	var waits atomic.Int32
	c := newClient(t, srv.addr(), 300*time.Millisecond, WithOnWaiting(func(string) { waits.Add(1) }))
	res := acquireAsync(ctxTimeout(t, wait), c, "dead", false)
	conn := srv.accept()
	tA := conn.expectAcquire("dead", 300*time.Millisecond)
	conn.send(waiting())
	conn.expectHeartbeat() // never answered
	closed := conn.expectClosed()
	assert.GreaterOrEqual(t, closed.Sub(tA), 200*time.Millisecond)
	again := srv.accept()
	again.expectAcquire("dead", 300*time.Millisecond)
	again.send(acquired(21))
	r := result(t, res)
	require.NoError(t, r.err)
	require.Equal(t, int32(1), waits.Load())
	require.NoError(t, r.lock.Release())
}

func TestHeldConnectionClosedByServer(t *testing.T) {
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), 10*time.Second)
	lock, conn, _ := grant(t, srv, c, "eof", 2)
	conn.c.Close()
	lockDone(t, lock)
	err := lock.Err()
	require.ErrorIs(t, err, ErrLockLost)
	require.NotErrorIs(t, err, ErrClientTimeout)
	var se *ServerError
	require.False(t, errors.As(err, &se))
	srv.noConnection(200 * time.Millisecond)
}

func TestProtocolViolationsLoseTheLock(t *testing.T) {
	cases := map[string][]byte{
		"unknown message type":     {0x7f},
		"WAITING while held":       waiting(),
		"unsolicited ACQUIRED":     acquired(2),
		"client message type 0x01": {protocol.MsgAcquire},
	}
	srv := newFakeServer(t)
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			c := newClient(t, srv.addr(), 10*time.Second)
			lock, conn, _ := grant(t, srv, c, "bad", 2)
			conn.send(b)
			lockDone(t, lock)
			require.ErrorIs(t, lock.Err(), ErrLockLost)
			require.ErrorIs(t, lock.Err(), ErrProtocol)
			conn.expectClosed()
		})
	}
	t.Run("token changed in an ack", func(t *testing.T) {
		c := newClient(t, srv.addr(), 400*time.Millisecond)
		lock, conn, _ := grant(t, srv, c, "bad", 2)
		conn.expectHeartbeat()
		conn.send(acquired(3))
		lockDone(t, lock)
		require.ErrorIs(t, lock.Err(), ErrProtocol)
	})
}

func TestLockContext(t *testing.T) {
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), 10*time.Second)
	lock, conn, _ := grant(t, srv, c, "ctx", 2)
	ctx, cancel := lock.Context(context.Background())
	defer cancel()
	require.NoError(t, ctx.Err())
	conn.send(errFrame(0x01, ""))
	select {
	case <-ctx.Done():
	case <-time.After(wait):
		t.Fatal("context not cancelled on loss")
	}
	require.ErrorIs(t, context.Cause(ctx), ErrLockLost)
	require.ErrorIs(t, context.Cause(ctx), protocol.ErrShuttingDown)
}

// TestReleaseWithoutConfirmation: a server that never closes its side does
// not hold Release up for more than a moment.
func TestReleaseWithoutConfirmation(t *testing.T) {
	srv := newFakeServer(t)
	srv.ignoreEOF.Store(true)
	c := newClient(t, srv.addr(), 10*time.Second)
	lock, conn, _ := grant(t, srv, c, "noconfirm", 1)
	start := time.Now()
	require.NoError(t, lock.Release())
	took := time.Since(start)
	assert.GreaterOrEqual(t, took, releaseWait/2, "Release should have waited for the server")
	assert.Less(t, took, releaseWait+2*time.Second)
	conn.expectClosed()
}

// TestDeadlineErrorKeepsOnlyUnreachedCauses: a deadline that ends a wait in
// the queue does not carry the failure of an earlier attempt, which would
// make a busy lock look like an unreachable server.
func TestDeadlineErrorKeepsOnlyUnreachedCauses(t *testing.T) {
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), 10*time.Second)
	res := acquireAsync(ctxTimeout(t, time.Second), c, "busy-late", false)
	first := srv.accept()
	first.expectAcquire("busy-late", 10*time.Second)
	first.send(errFrame(0x01, ""))
	again := srv.accept()
	again.expectAcquire("busy-late", 10*time.Second)
	again.send(waiting())
	r := result(t, res)
	require.ErrorIs(t, r.err, context.DeadlineExceeded)
	var se *ServerError
	require.False(t, errors.As(r.err, &se), "stale cause in %v", r.err)
	require.NotErrorIs(t, r.err, ErrUnavailable)
	again.expectClosed()
}

// A port that is not monolock (here an HTTP answer, as the admin port
// gives) fails at once with a message that says so, and is not retried.
func TestNotMonolockFailsAtOnce(t *testing.T) {
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), 10*time.Second)
	res := acquireAsync(ctxTimeout(t, wait), c, "x", false)
	conn := srv.accept()
	conn.expectAcquire("x", 10*time.Second)
	start := time.Now()
	conn.send([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
	r := result(t, res)
	assert.Less(t, time.Since(start), time.Second, "waited for a timeout")
	require.ErrorIs(t, r.err, ErrProtocol)
	require.ErrorIs(t, r.err, ErrUnavailable, "no monolock server was reached")
	require.Equal(t, "monolock: no server available: "+srv.addr()+` does not speak the monolock protocol (it sent "HTTP/1.1 400…"); is this the admin port?`, r.err.Error())
	srv.noConnection(200 * time.Millisecond)
}
