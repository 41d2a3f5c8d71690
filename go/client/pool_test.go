package client

import (
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// autoServe answers a fake session as a server with no contention would:
// SESSION_OK (max streams), every OPEN granted with the next token, every
// RELEASE answered RELEASED, every HEARTBEAT ALIVE.
func autoServe(conn *fakeSessionConn, max uint32, tokens *atomic.Uint64) {
	for f := range conn.frames {
		if f.err != nil {
			return
		}
		switch f.typ {
		case protocol.MsgSession:
			conn.send(sessionOK(max))
		case protocol.MsgHeartbeat:
			conn.send([]byte{protocol.MsgAlive})
		case protocol.MsgOpen:
			conn.send(streamAcquired(f.stream, tokens.Add(1)))
		case protocol.MsgRelease:
			conn.send(streamReleased(f.stream))
		}
	}
}

func TestPoolSpreadsAndReplacesDeadSessions(t *testing.T) {
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), time.Second)
	pool, err := NewPool(c, 2)
	require.NoError(t, err)
	defer pool.Close()
	var tokens atomic.Uint64
	conns := make(chan *fakeSessionConn, 4)
	go func() {
		for range 3 {
			select {
			case fc := <-srv.conns:
				conn := newFakeSessionConn(t, fc)
				conns <- conn
				go autoServe(conn, 2, &tokens)
			case <-time.After(wait):
				return
			}
		}
	}()
	ctx := ctxTimeout(t, wait)
	a, err := pool.Acquire(ctx, "a")
	require.NoError(t, err)
	first := receive(t, conns)
	b, err := pool.Acquire(ctx, "b")
	require.NoError(t, err)
	receive(t, conns) // a second session: the first has a claim open
	pa := a.h.(*streamClaim).s
	pb := b.h.(*streamClaim).s
	assert.NotSame(t, pa, pb, "claims spread over the pool's sessions")

	// Both sessions have one claim of two: the third goes to either, the
	// fourth to the other, the fifth finds the pool full.
	l3, err := pool.Acquire(ctx, "c")
	require.NoError(t, err)
	l4, err := pool.Acquire(ctx, "d")
	require.NoError(t, err)
	assert.NotSame(t, l3.h.(*streamClaim).s, l4.h.(*streamClaim).s)
	_, err = pool.Acquire(ctx, "e")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "every session of the pool")

	// The first session dies: its claims are lost together, and the next
	// claim gets a new session.
	first.send(errFrame(protocol.ErrShuttingDown.Code, ""))
	lockDone(t, a)
	require.ErrorIs(t, a.Err(), protocol.ErrShuttingDown)
	lost := l3
	if l3.h.(*streamClaim).s != pa {
		lost = l4
	}
	lockDone(t, lost)
	require.NoError(t, b.Err(), "the other session's claims live on")
	f, err := pool.Acquire(ctx, "f")
	require.NoError(t, err)
	receive(t, conns)
	assert.NotSame(t, pa, f.h.(*streamClaim).s)
	assert.NotSame(t, pb, f.h.(*streamClaim).s)

	require.NoError(t, pool.Close())
	require.ErrorIs(t, b.Err(), ErrReleased)
	_, err = pool.Acquire(ctx, "g")
	require.ErrorIs(t, err, ErrSessionClosed)
}

func TestPoolSizeMustBePositive(t *testing.T) {
	c := newClient(t, "127.0.0.1:1", time.Second)
	_, err := NewPool(c, 0)
	require.Error(t, err)
}

// A session that has used every stream id takes no new claim: the next
// claim opens a new session even in a pool of one, and the old session is
// closed once its last claim has been released.
func TestPoolRetiresASessionWithoutIDsLeft(t *testing.T) {
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), time.Second)
	pool, err := NewPool(c, 1)
	require.NoError(t, err)
	defer pool.Close()
	var tokens atomic.Uint64
	conns := make(chan *fakeSessionConn, 2)
	firstEnded := make(chan struct{})
	go func() {
		for i := range 2 {
			select {
			case fc := <-srv.conns:
				conn := newFakeSessionConn(t, fc)
				conns <- conn
				go func() {
					autoServe(conn, 10, &tokens) // until the client closes
					if i == 0 {
						close(firstEnded)
					}
				}()
			case <-time.After(wait):
				return
			}
		}
	}()
	ctx := ctxTimeout(t, wait)
	a, err := pool.Acquire(ctx, "a")
	require.NoError(t, err)
	receive(t, conns)
	old := a.h.(*streamClaim).s
	old.mu.Lock()
	old.core.SkipIDs(math.MaxUint32)
	old.mu.Unlock()

	b, err := pool.Acquire(ctx, "b")
	require.NoError(t, err)
	receive(t, conns)
	assert.NotSame(t, old, b.h.(*streamClaim).s, "a new session: the old one has no id left")
	require.NoError(t, a.Err(), "the retiring session's claim lives on")

	require.NoError(t, a.Release())
	_, err = pool.Acquire(ctx, "c") // finds the retiring session without claims: closes it
	require.NoError(t, err)
	select {
	case <-firstEnded:
	case <-time.After(wait):
		t.Fatal("the retired session was not closed once its last claim was released")
	}
}
