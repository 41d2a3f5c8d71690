package client

// A held lock: the server closing it, protocol violations that lose it,
// its context, and a release the server never confirms.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/pkg/protocol"
)

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
