package server

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
	// A crash: the next run reads the same directory and knows nothing
	// else. (The first server keeps serving; it shares only the files.)
	require.NoError(t, first.Server.tokens.Close())

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
	assert.LessOrEqual(t, wait, time.Duration(leaseMS)*time.Millisecond)
	b.acquire("restart", 60000)
	b.expectWaiting()
	a.expectAcquired()
	assert.GreaterOrEqual(t, time.Since(started), time.Duration(leaseMS)*time.Millisecond,
		"granted before the previous run's lease could have ended")
	b.expectSilence(200 * time.Millisecond) // second in line
	assert.Zero(t, second.Server.RestartWait())
	assert.True(t, second.Server.Ready(), "granting again, so ready")
	require.NoError(t, second.Server.tokens.Close())

	// The record only grows: a third run waits for the 60 s lease.
	third := startServer(t, Config{DataDir: dir})
	c := dial(t, third.addr)
	// A lease longer than the silence watched (a 1 s lease could run out
	// within it and close the session), shorter than the record.
	c.acquire("third", 10000)
	c.expectWaiting()
	c.expectSilence(time.Second)
	assert.Equal(t, time.Minute, third.Server.leases.Longest())
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
