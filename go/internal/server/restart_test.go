package server

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// crash makes srv's data directory look like the one a kill -9 leaves:
// nothing more is written to it, and its lock is free for the next run.
// (srv keeps serving its sessions; the runs share only the files.)
func crash(t *testing.T, srv *testServer) {
	t.Helper()
	srv.Server.claims.Record().Close()
	require.NoError(t, srv.Server.tokens.Close())
}

// slack is how late a grant may come after the moment it is due: generous
// for a loaded 2-core machine. The bounds a grant must not come before are
// exact: they are the safety property.
const slack = 2 * time.Second

// blocked reports whether the listing shows name held back.
func blocked(srv *testServer, name string) bool {
	for _, l := range srv.Locks() {
		if l.Name == name {
			return l.Blocked
		}
	}
	return false
}

// A server that starts on a data directory whose previous run acknowledged
// a lease grants nothing until that lease has passed: a holder of the old
// run that heard of no crash (cut off, or its FIN lost) may count on its
// lock until then. Claims queue and are granted in arrival order after.
func TestRestartWaitsOutThePreviousRunsLeases(t *testing.T) {
	const leaseMS = 1500
	dir := t.TempDir()
	first := startServer(t, Config{DataDir: dir})
	holder := dial(t, first.addr)
	holder.acquire("restart", leaseMS)
	holder.expectAcquired()
	crash(t, first)

	started := time.Now()
	second := startServer(t, Config{DataDir: dir})
	a, b := dial(t, second.addr), dial(t, second.addr)
	a.acquire("restart", 60000)
	a.expectWaiting()
	// Serving (a was answered), yet not ready: operators see the wait, and
	// how long it still lasts.
	assert.False(t, second.Server.Ready(), "ready while waiting out the previous run's leases")
	wait := second.Server.RestartWait()
	assert.Positive(t, wait)
	assert.LessOrEqual(t, wait, 1536*time.Millisecond, "the lease, on the lease record's grid (leaserecord.coarsen)")
	b.acquire("restart", 60000)
	b.expectWaiting()
	a.expectAcquired()
	assert.GreaterOrEqual(t, time.Since(started), time.Duration(leaseMS)*time.Millisecond,
		"granted before the previous run's lease could have ended")
	b.expectSilence(200 * time.Millisecond) // second in line
	assert.Zero(t, second.Server.RestartWait())
	assert.True(t, second.Server.Ready(), "granting again, so ready")
	crash(t, second)

	// The third run waits for the 60 s leases on "restart" only: they were
	// recorded by name, and the first run's 1.5 s wait has passed.
	third := startServer(t, Config{DataDir: dir})
	assert.Zero(t, third.Server.RestartWait())
	assert.True(t, blocked(third, "restart"))
	c := dial(t, third.addr)
	// A lease longer than the silence watched (a 1 s lease could run out
	// within it and close the session).
	c.acquire("restart", 10000)
	c.expectWaiting()
	d := dial(t, third.addr)
	d.acquire("third", 10000)
	d.expectAcquired()
	c.expectSilence(time.Second)
}

// A data directory that has never acknowledged a lease (a new server)
// grants at once.
func TestFirstStartGrantsAtOnce(t *testing.T) {
	srv := startServer(t, Config{})
	c := dial(t, srv.addr)
	c.acquire("fresh", 60000)
	c.expectAcquired()
	assert.Zero(t, srv.Server.RestartWait())
	assert.True(t, srv.Server.Ready())
}

// After a crash each lock waits for the leases its own holders had: the
// short leases are covered by one wait for every lock, a long one holds
// back its lock only. Readiness follows the wait for every lock.
func TestRestartAfterCrashHoldsBackEachLockForItsOwnLeases(t *testing.T) {
	const short, long = 400 * time.Millisecond, 5 * time.Second
	dir := t.TempDir()
	cfg := Config{DataDir: dir, namedLease: time.Second}
	first := startServer(t, cfg)
	holdLongAndShort(t, first.addr, long, short)
	crashed := time.Now()
	crash(t, first)

	second := startServer(t, cfg)
	assert.True(t, blocked(second, "long"), "the listing shows the long lease's lock held back")
	claims := map[string]*client{}
	for _, name := range []string{"long", "short", "other"} {
		c := dial(t, second.addr)
		c.acquire(name, 60000)
		c.expectWaiting()
		claims[name] = c
	}
	assert.False(t, second.Server.Ready())
	for _, name := range []string{"short", "other"} {
		claims[name].expectAcquired()
		since := time.Since(crashed)
		assert.GreaterOrEqual(t, since, short, "%s granted before the previous run's short lease could have ended", name)
		assert.Less(t, since, short+slack, "%s waited for the long lease of another lock", name)
	}
	assert.True(t, second.Server.Ready(), "one lock held back does not make the server unready")
	assert.True(t, blocked(second, "long"))
	claims["long"].expectAcquired()
	since := time.Since(crashed)
	assert.GreaterOrEqual(t, since, long, "granted before the previous run's holder's lease could have ended")
	assert.Less(t, since, long+slack)
}

// A crash soon after a silent holder's expiry, while its lock delay runs:
// the next run still holds the lock back until the delay would have ended
// (before, the delay was written lazily after the expiry, and a crash within
// that second granted the lock a lease after the holder's last message).
func TestCrashDuringTheLockDelayKeepsIt(t *testing.T) {
	const leaseMS, delay = 500, 3 * time.Second
	dir := t.TempDir()
	cfg := Config{DataDir: dir, LockDelay: delay}
	first := startServer(t, cfg)
	holder := dial(t, first.addr)
	holder.acquire("delayed", leaseMS)
	holder.expectAcquired()
	lastHeard := time.Now() // the holder now goes silent
	// Its expiry, then a crash at once, within the lazy write's second.
	require.Eventually(t, func() bool { return blocked(first, "delayed") }, slack+time.Duration(leaseMS)*time.Millisecond, 5*time.Millisecond)
	crash(t, first)

	second := startServer(t, cfg)
	c := dial(t, second.addr)
	c.acquire("delayed", 60000)
	c.expectWaiting()
	c.expectAcquired()
	assert.GreaterOrEqual(t, time.Since(lastHeard), time.Duration(leaseMS)*time.Millisecond+delay,
		"granted before the holder's lease and the lock delay could have ended")
}

// shutdownAsync stops srv while the test goes on talking to its clients.
func shutdownAsync(srv *testServer) <-chan error { return shutdownWithin(srv, 20*time.Second) }

// shutdownWithin is shutdownAsync with a drain of drain.
func shutdownWithin(srv *testServer, drain time.Duration) <-chan error {
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), drain)
		defer cancel()
		done <- srv.Server.Shutdown(ctx)
	}()
	return done
}

// After a clean stop in which every holder closed after its ERROR 0x01,
// the next run has nothing to wait for: it grants at once.
func TestCleanShutdownLeavesNothingToWaitFor(t *testing.T) {
	for _, named := range []time.Duration{0, time.Second} {
		t.Run(fmt.Sprintf("named-above=%v", named), func(t *testing.T) {
			dir := t.TempDir()
			cfg := Config{DataDir: dir, namedLease: named}
			first := startServer(t, cfg)
			a, _, waiters := queue(t, first, "a", 1)
			b := dial(t, first.addr)
			b.acquire("b", 5000)
			b.expectAcquired()

			stopped := shutdownAsync(first)
			for _, c := range []*client{a, b, waiters[0]} {
				c.expectError(protocol.ErrShuttingDown)
				c.expectClosed()
				c.conn.Close()
			}
			require.NoError(t, <-stopped)

			second := startServer(t, cfg)
			assert.Zero(t, second.Server.RestartWait())
			assert.Empty(t, second.Server.Locks(), "no lock held back")
			for _, name := range []string{"a", "b"} {
				c := dial(t, second.addr)
				c.acquire(name, 60000)
				c.expectAcquired()
			}
			assert.True(t, second.Server.Ready()) // serving (a claim was answered), nothing to wait for
		})
	}
}

// A holder that does not close after the shutdown's ERROR 0x01 may not
// have heard it (partitioned, the ERROR and the FIN lost): the next run
// holds its lock back until its lease would have run out, and nothing
// else. A holder whose lease ran out during the drain knows by its own
// clock, so does one that closed.
func TestShutdownKeepsTheWaitOfAHolderThatDidNotClose(t *testing.T) {
	for _, named := range []time.Duration{0, time.Second} {
		t.Run(fmt.Sprintf("named-above=%v", named), func(t *testing.T) {
			// The drain (1.5 s) ends before cut's lease: cut is cut.
			const cutLease, outlivedLease, drain = 4 * time.Second, 300 * time.Millisecond, 1500 * time.Millisecond
			dir := t.TempDir()
			cfg := Config{DataDir: dir, namedLease: named}
			first := startServer(t, cfg)
			told := dial(t, first.addr)
			told.acquire("told", 5000)
			told.expectAcquired()
			outlived := dial(t, first.addr)
			outlived.acquire("outlived", uint32(outlivedLease.Milliseconds()))
			outlived.expectAcquired()
			cut := dial(t, first.addr)
			cut.acquire("cut", uint32(cutLease.Milliseconds()))
			tok := cut.expectAcquired()
			sent := time.Now() // before the send: the server's lease runs from later
			cut.heartbeat()
			require.Equal(t, tok, cut.expectAcquired())
			outlived.heartbeat()
			outlived.expectAcquired()

			// From here on cut and outlived neither read nor close.
			stopped := shutdownWithin(first, drain)
			told.expectError(protocol.ErrShuttingDown)
			told.expectClosed()
			told.conn.Close()
			require.NoError(t, <-stopped, "the drain cuts the silent session before its end")

			second := startServer(t, cfg)
			assert.Zero(t, second.Server.RestartWait(), "no wait for every lock")
			assert.True(t, blocked(second, "cut"))
			assert.False(t, blocked(second, "outlived"))
			for _, name := range []string{"told", "outlived", "fresh"} {
				c := dial(t, second.addr)
				c.acquire(name, 60000)
				c.expectAcquired()
			}
			c := dial(t, second.addr)
			c.acquire("cut", 60000)
			c.expectWaiting()
			c.expectAcquired()
			assert.GreaterOrEqual(t, time.Since(sent), cutLease,
				"granted before the lease of the holder that did not close could have ended")
			assert.Less(t, time.Since(sent), cutLease+slack)
		})
	}
}

// denySecret refuses the names under secret/.
type denySecret struct{}

func (denySecret) Authorize(_ net.Conn, name string) error {
	if strings.HasPrefix(name, "secret/") {
		return fmt.Errorf("%q is not yours", name)
	}
	return nil
}

// An ACQUIRE that the ACL or --max-lease refuses is never acknowledged,
// so its lease is nothing a restart has to wait out: a crash right after
// leaves no wait, for its lock nor for any other.
func TestRefusedAcquiresLeaveNoLease(t *testing.T) {
	dir := t.TempDir()
	first := startServer(t, Config{DataDir: dir, Authorizer: denySecret{}, MaxLease: 30 * time.Second})
	for _, claim := range []struct {
		name    string
		leaseMS uint32
		code    *protocol.Error
	}{
		{"secret/long", 20000, protocol.ErrNotAuthorized},
		{"secret/short", 9000, protocol.ErrNotAuthorized},
		{"too-long", 40000, protocol.ErrInvalidLease},
	} {
		c := dial(t, first.addr)
		c.acquire(claim.name, claim.leaseMS)
		c.expectError(claim.code)
		c.expectClosed()
	}
	crash(t, first)

	second := startServer(t, Config{DataDir: dir})
	assert.Zero(t, second.Server.RestartWait())
	assert.Empty(t, second.Server.Locks(), "no lock held back")
	for _, name := range []string{"secret/long", "secret/short", "too-long", "other"} {
		c := dial(t, second.addr)
		c.acquire(name, 10000)
		c.expectAcquired()
	}
}

// A holder slowed down (a loaded machine) reads its ERROR 0x01 and closes
// well after the linger a session ends with, yet within the drain: it has
// heard, and the next run holds nothing back. (With the drain of a
// second that every session had, the lock waited out the whole lease.)
func TestShutdownWaitsForASlowHolderToClose(t *testing.T) {
	dir := t.TempDir()
	first := startServer(t, Config{DataDir: dir})
	slow := dial(t, first.addr)
	slow.acquire("slow", 60000)
	slow.expectAcquired()
	stopped := shutdownWithin(first, 10*time.Second)
	slow.expectError(protocol.ErrShuttingDown)
	time.Sleep(lingerTimeout + 500*time.Millisecond)
	slow.conn.Close()
	require.NoError(t, <-stopped)

	second := startServer(t, Config{DataDir: dir})
	assert.False(t, blocked(second, "slow"), "the lock of a holder that closed is not held back")
	c := dial(t, second.addr)
	c.acquire("slow", 60000)
	c.expectAcquired()
}

// A clean restart keeps a semaphore's held-back permits as permits: the
// holder of one of two permits reset its connection (its lock is held
// back for its lease), the server stops cleanly, and the next run grants
// a claim that fits beside that permit at once, queues one that does
// not, and grants it only once the permit's hold has passed. (The whole
// name used to be held back.)
func TestCleanRestartKeepsHeldBackPermitsAsPermits(t *testing.T) {
	const leaseMS = 4000
	dir := t.TempDir()
	first := startServer(t, Config{DataDir: dir})
	shared := func(c *client, leaseMS uint32) {
		frame, err := protocol.AppendAcquireV2(nil, "pool", leaseMS, protocol.ModeShared, 2)
		require.NoError(t, err)
		c.send(frame)
	}
	reset := dial(t, first.addr)
	shared(reset, leaseMS)
	reset.expectAcquired()
	resetAt := time.Now()
	require.NoError(t, reset.conn.SetLinger(0))
	require.NoError(t, reset.conn.Close())
	require.Eventually(t, func() bool { return first.Server.HeldBack() == 1 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, <-shutdownAsync(first))

	second := startServer(t, Config{DataDir: dir})
	assert.False(t, blocked(second, "pool"), "the name is not held back whole")
	require.Equal(t, 1, second.Server.HeldBack(), "the permit is")
	// The second run's claims send no heartbeats: their lease outlasts
	// the test, so none of them is held back in turn on a slow machine.
	fits := dial(t, second.addr)
	shared(fits, 10*leaseMS)
	fits.expectAcquired()
	over := dial(t, second.addr)
	shared(over, 10*leaseMS)
	over.expectWaiting()
	over.expectAcquired()
	assert.GreaterOrEqual(t, time.Since(resetAt), leaseMS*time.Millisecond,
		"the held-back permit was given away before its holder's lease could have ended")
	assert.Zero(t, second.Server.HeldBack())
}
