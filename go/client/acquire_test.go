package client

// How an acquisition that is not granted at once ends: busy, cancelled,
// past its deadline, no server reachable, on to the next server, queued
// again after a dead connection, or a port that is not monolock.

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/monolock/monolock/go/pkg/protocol"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
	var tmp interface{ Temporary() bool }
	require.ErrorAs(t, r.err, &tmp)
	assert.False(t, tmp.Temporary(), "not temporary (spec/vectors/temporary.json)")
	srv.noConnection(200 * time.Millisecond)
}

// A passive server of an HA cell that names a server of the client's list
// (ERROR 0x03) sends the next attempt straight there, after a pause of the
// first backoff step only, skipping the servers between.
func TestNotActiveSendsTheNextAttemptToTheNamedLeader(t *testing.T) {
	passive, skipped, leader := newFakeServer(t), newFakeServer(t), newFakeServer(t)
	c, err := New(WithServers(passive.addr(), skipped.addr(), leader.addr()), WithLease(10*time.Second))
	require.NoError(t, err)
	res := acquireAsync(ctxTimeout(t, wait), c, "x", false)

	p := passive.accept()
	p.expectAcquire("x", 10*time.Second)
	told := time.Now()
	p.send(errFrame(protocol.ErrNotActive.Code, leader.addr()))
	l := leader.accept()
	at := l.expectAcquire("x", 10*time.Second)
	assert.Less(t, at.Sub(told), time.Second, "after a pause of at most 50 ms, not a grown backoff")
	l.send(acquired(9))
	r := result(t, res)
	require.NoError(t, r.err)
	assert.Equal(t, uint64(9), r.lock.Token())
	skipped.noConnection(100 * time.Millisecond)
	require.NoError(t, r.lock.Release())
}

// An address that is not in the client's list is never dialled, whatever a
// passive server says: the next attempt moves on through the list.
func TestNotActiveNeverDialsAnAddressOutsideTheList(t *testing.T) {
	passive, next := newFakeServer(t), newFakeServer(t)
	elsewhere := newFakeServer(t)
	c, err := New(WithServers(passive.addr(), next.addr()), WithLease(10*time.Second))
	require.NoError(t, err)
	res := acquireAsync(ctxTimeout(t, wait), c, "x", false)
	p := passive.accept()
	p.expectAcquire("x", 10*time.Second)
	p.send(errFrame(protocol.ErrNotActive.Code, elsewhere.addr()))
	n := next.accept()
	n.expectAcquire("x", 10*time.Second)
	n.send(acquired(3))
	r := result(t, res)
	require.NoError(t, r.err)
	elsewhere.noConnection(100 * time.Millisecond)
	require.NoError(t, r.lock.Release())
}

// A try-acquire's busy error says what kept it out, in every client's
// words (spec/vectors/messages.json, busy).
func TestTryAcquireBusyNamesThePermits(t *testing.T) {
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), 10*time.Second)
	res := make(chan error, 1)
	go func() {
		_, err := c.TryAcquire(ctxTimeout(t, wait), "pool/gpu", Shared(), Limit(2))
		res <- err
	}()
	conn := srv.accept()
	conn.send(waiting())
	err := <-res
	require.ErrorIs(t, err, ErrBusy)
	assert.Equal(t, `monolock: all 2 permits of "pool/gpu" are taken`, err.Error())
}
