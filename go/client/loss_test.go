package client

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The rule these tests pin (spec/vectors/session.json runs it on the core):
// a held lock's loss is told first, and the connection, whose close a live
// server takes as a release, stays open until the application lets go or a
// full lease after the last acknowledged send. The bounds leave the lease's
// 0.2 margin minus 0.05 for a loaded machine.

const lossLease = 2 * time.Second

// TestLossIsToldBeforeTheClose: the link stays up, the acks stop. Done
// closes at the deadline, the FIN follows at least 0.15 x lease later, and
// a late ack neither revives the lock nor brings another heartbeat.
func TestLossIsToldBeforeTheClose(t *testing.T) {
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), lossLease)
	lock, conn, tAcquire := grant(t, srv, c, "late", 3)
	vu := lock.ValidUntil()
	conn.expectHeartbeat() // never answered in time

	told := lockDone(t, lock)
	require.ErrorIs(t, lock.Err(), ErrClientTimeout)
	assert.False(t, told.Before(vu), "told %v before ValidUntil", vu.Sub(told))
	conn.send(acquired(3)) // the late ack: read and ignored

	closed := conn.expectClosed() // and no heartbeat before it
	assert.GreaterOrEqual(t, closed.Sub(told), lossLease*15/100,
		"the FIN came %v after the loss was told", closed.Sub(told))
	assert.Less(t, closed.Sub(tAcquire), lossLease*3/2, "the lost lock's connection was held too long")
	require.ErrorIs(t, lock.Err(), ErrClientTimeout, "a late ack never revives a lost lock")
	require.Equal(t, vu, lock.ValidUntil())
}

// TestReleaseAfterLossClosesAtOnce: once the application lets go of a lost
// lock, nothing is left to protect: Release closes at once, without the
// hand-back wait.
func TestReleaseAfterLossClosesAtOnce(t *testing.T) {
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), lossLease)
	lock, conn, _ := grant(t, srv, c, "let-go", 4)
	conn.expectHeartbeat()
	lockDone(t, lock)

	start := time.Now()
	require.NoError(t, lock.Release())
	closed := conn.expectClosed()
	assert.Less(t, closed.Sub(start), lossLease/10, "Release after loss waited")
	require.ErrorIs(t, lock.Err(), ErrClientTimeout, "Release keeps the loss as the cause")
}

// TestPolledErrDecidesForDone: Err past the deadline decides the loss
// itself, and Done is closed by that same decision, whatever the claim's
// goroutine is doing.
func TestPolledErrDecidesForDone(t *testing.T) {
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), lossLease)
	lock, conn, _ := grant(t, srv, c, "polled", 5)
	conn.expectHeartbeat()
	vu := lock.ValidUntil()
	time.Sleep(time.Until(vu))
	require.ErrorIs(t, lock.Err(), ErrLockLost)
	select {
	case <-lock.Done():
	default:
		t.Fatal("Err reported the loss but Done is still open")
	}
}

// TestServerEndIsToldAtOnce: when the server ends the session the lock is
// lost at once; the server has already let go.
func TestServerEndIsToldAtOnce(t *testing.T) {
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), lossLease)
	lock, conn, _ := grant(t, srv, c, "kicked", 6)
	start := time.Now()
	conn.send(errFrame(0x02, "kicked"))
	told := lockDone(t, lock)
	assert.Less(t, told.Sub(start), lossLease/10)
	var se *ServerError
	require.ErrorAs(t, lock.Err(), &se)
	require.Equal(t, uint8(0x02), se.Code)
	conn.expectClosed()
}
