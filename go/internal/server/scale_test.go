package server

import (
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// raiseFileLimit lifts the soft RLIMIT_NOFILE to need if the hard limit allows.
func raiseFileLimit(t *testing.T, need uint64) {
	t.Helper()
	var lim syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim))
	if lim.Cur >= need {
		return
	}
	require.GreaterOrEqual(t, lim.Max, need, "hard RLIMIT_NOFILE too low for this test")
	old := lim
	lim.Cur = need
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim))
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
}

// memStats returns the Go memory in use, after a GC.
func memStats() runtime.MemStats {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m
}

// Test2000ConcurrentSessions holds 2,000 sessions open at once (1,000 locks,
// each with a holder and a waiter), checks every reply, measures the memory
// of an idle session, then closes them all and checks that every lock is
// promoted exactly once and the server forgets everything.
func Test2000ConcurrentSessions(t *testing.T) {
	const locks, perLock = 1000, 2
	const total = locks * perLock
	raiseFileLimit(t, 2*total+256) // both ends of each connection live here
	srv := startServer(t, Config{})
	baseGoroutines := runtime.NumGoroutine()
	baseMem := memStats()

	deadline := time.Now().Add(60 * time.Second)
	clients := make([]*client, total)
	tokens := make([]uint64, total)
	// Holders first, then waiters, so each lock's holder is known; a few
	// workers dial in parallel to keep the test quick but bounded.
	for round := 0; round < perLock; round++ {
		var wg sync.WaitGroup
		errs := make(chan error, locks)
		work := make(chan int)
		for w := 0; w < 16; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range work {
					idx := round*locks + i
					c := dial(t, srv.addr)
					clients[idx] = c
					if _, err := c.conn.Write(acquireFrame(t, fmt.Sprint("scale-", i), 600000)); err != nil {
						errs <- err
						continue
					}
					f, err := c.read(time.Until(deadline))
					switch {
					case err != nil:
						errs <- err
					case round == 0 && f.Type != protocol.MsgAcquired, round > 0 && f.Type != protocol.MsgWaiting:
						errs <- fmt.Errorf("session %d: unexpected %v", idx, f)
					}
					tokens[idx] = f.Token
				}
			}()
		}
		for i := 0; i < locks; i++ {
			work <- i
		}
		close(work)
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
	}
	require.Equal(t, total, srv.Sessions())
	assert.Len(t, srv.Locks(), locks)

	mem := memStats()
	heap := float64(mem.HeapAlloc-baseMem.HeapAlloc) / total
	stack := float64(mem.StackInuse-baseMem.StackInuse) / total
	perSession := heap + stack
	goroutines := runtime.NumGoroutine() - baseGoroutines
	t.Logf("%d sessions: %.0f bytes of Go memory per session (%.0f heap, %.0f stack; "+
		"server and test client together), %d goroutines", total, perSession, heap, stack, goroutines)
	assert.LessOrEqual(t, goroutines, total+1, "one goroutine per session")
	if !raceEnabled { // the race detector inflates every allocation and stack
		assert.Less(t, perSession, 10*1024.0, "an idle session must stay well under 10 KiB")
	}

	// Every session still answers a heartbeat.
	for i, c := range clients {
		c.heartbeat()
		f := c.next()
		if i < locks {
			require.Equal(t, protocol.MsgAcquired, f.Type)
			require.Equal(t, tokens[i], f.Token)
		} else {
			require.Equal(t, protocol.MsgWaiting, f.Type)
		}
	}

	// Closing the holders promotes each waiter once, with a fresh token.
	seen := make(map[uint64]bool, total)
	for _, tok := range tokens[:locks] {
		require.False(t, seen[tok], "token %d issued twice", tok)
		seen[tok] = true
	}
	for _, c := range clients[:locks] {
		c.conn.Close()
	}
	for _, c := range clients[locks:] {
		tok := c.expectAcquired()
		require.False(t, seen[tok], "token %d issued twice", tok)
		seen[tok] = true
		c.conn.Close()
	}
	require.Len(t, seen, total)
	require.Eventually(t, func() bool { return srv.Sessions() == 0 }, replyTimeout, 5*time.Millisecond)
	assert.Empty(t, srv.Locks())
	// Polled by hand: require.Eventually runs its own goroutines.
	for stop := time.Now().Add(replyTimeout); runtime.NumGoroutine() > baseGoroutines; time.Sleep(5 * time.Millisecond) {
		require.True(t, time.Now().Before(stop), "session goroutines left: %d over %d",
			runtime.NumGoroutine(), baseGoroutines)
	}
}
