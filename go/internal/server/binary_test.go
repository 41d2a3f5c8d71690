package server

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/testbin"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// startBinary runs `monolock serve` on a free loopback port and returns once
// it has logged its address.
func startBinary(t *testing.T, bin string, args ...string) *testbin.Server {
	t.Helper()
	return startBinaryEnv(t, bin, nil, args...)
}

// startBinaryEnv is startBinary with extra environment variables.
func startBinaryEnv(t *testing.T, bin string, env []string, args ...string) *testbin.Server {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	return testbin.Start(t, binaryWait, cmd)
}

// binaryWait bounds the start and the exit of a monolock serve process.
const binaryWait = 30 * time.Second

// Tokens never go backwards across kill -9 and a restart on the same data
// directory, also when the crash happens in the middle of a reserved block.
func TestBinaryTokensMonotonicAcrossKill9(t *testing.T) {
	bin := testbin.Binary(t)
	dataDir := filepath.Join(t.TempDir(), "state")
	var highest uint64
	for run := 0; run < 3; run++ {
		started := time.Now()
		p := startBinary(t, bin, "--data-dir", dataDir)
		// Each run's lease is a second longer than the last run's: a
		// restart waits out the previous run's longest lease, and this
		// client, which sends no heartbeat while it waits, must outlast
		// that wait.
		lease := time.Duration(run+1) * time.Second
		for i := 0; i < 5; i++ {
			c := dial(t, p.Addr)
			c.acquire(fmt.Sprintf("crash-%d-%d", run, i), uint32(lease.Milliseconds()))
			tok := c.expectGranted()
			if run > 0 && i == 0 {
				assert.GreaterOrEqual(t, time.Since(started), lease-time.Second, "a restart waits out the leases of the run before")
			}
			require.Greater(t, tok, highest, "run %d grant %d", run, i)
			highest = tok
			c.conn.Close()
		}
		require.NoError(t, p.Cmd.Process.Signal(syscall.SIGKILL))
		p.WaitExit(binaryWait)
	}
	t.Logf("highest token after 3 crashes: %d", highest)
}

func TestBinarySIGTERMIsGraceful(t *testing.T) {
	bin := testbin.Binary(t)
	p := startBinary(t, bin, "--data-dir", t.TempDir())
	ts := &testServer{addr: p.Addr}
	holder := dial(t, ts.addr)
	holder.acquire("term", 60000)
	holder.expectAcquired()
	waiter := dial(t, ts.addr)
	waiter.acquire("term", 60000)
	waiter.expectWaiting()

	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM))
	for _, c := range []*client{holder, waiter} {
		c.expectError(protocol.ErrShuttingDown)
		c.expectClosed()
		c.conn.Close()
	}
	assert.Equal(t, 0, p.WaitExit(binaryWait), p.LogText())
}

func TestBinaryFlags(t *testing.T) {
	bin := testbin.Binary(t)
	run := func(env []string, args ...string) (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), env...)
		out, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(out)
	}
	for _, args := range [][]string{
		{"serve", "--bogus"},
		{"serve", "--handshake-timeout", "soon"},
		{"serve", "--handshake-timeout", "0s"},
		{"serve", "extra-arg"},
	} {
		code, out := run(nil, args...)
		assert.Equal(t, 2, code, "%v: %s", args, out)
		assert.Equal(t, 1, strings.Count(out, "\n"), "one clear line: %q", out)
		assert.True(t, strings.HasPrefix(out, "monolock serve: "), out)
	}
	code, out := run(nil, "serve", "-h")
	assert.Equal(t, 0, code)
	for _, flag := range []string{"-listen", "-data-dir", "-handshake-timeout", "127.0.0.1:7117"} {
		assert.Contains(t, out, flag)
	}

	// The default data directory follows XDG and is created on first run.
	state := filepath.Join(t.TempDir(), "xdg-state")
	p := startBinaryEnv(t, bin, []string{"XDG_STATE_HOME=" + state})
	c := dial(t, p.Addr)
	c.acquire("xdg", 60000)
	c.expectAcquired()
	_, err := os.Stat(filepath.Join(state, "monolock", "token-hwm"))
	assert.NoError(t, err, "token mark in $XDG_STATE_HOME/monolock")
	c.conn.Close()
	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGINT))
	assert.Equal(t, 0, p.WaitExit(binaryWait), p.LogText())
}

// After kill -9 each lock waits for its own holders' leases only: a lock
// held on a 500 ms lease is granted half a second after the restart,
// although another lock was held on a 30 s lease, whose lock is granted
// only once that has passed.
func TestBinaryKill9HoldsBackOnlyTheLockOfTheLongLease(t *testing.T) {
	const long, short = 30 * time.Second, 500 * time.Millisecond
	bin := testbin.Binary(t)
	dataDir := filepath.Join(t.TempDir(), "state")
	p := startBinary(t, bin, "--data-dir", dataDir, "--admin", "off")
	holdLongAndShort(t, p.Addr, long, short)
	// Before the kill: the holders' leases ran from earlier, the restarted
	// server's waits run from later.
	killed := time.Now()
	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGKILL))
	p.WaitExit(binaryWait)

	q := startBinary(t, bin, "--data-dir", dataDir, "--admin", "off")
	restarted := time.Since(killed)
	sc, lc := dial(t, q.Addr), dial(t, q.Addr)
	lc.acquire("long", 60000) // no heartbeat while it waits: a lease past the wait
	lc.expectWaiting()
	sc.acquire("short", 60000)
	sc.expectGranted()
	shortGot := time.Since(killed)
	assert.GreaterOrEqual(t, shortGot, short, "granted before the short lease of the crashed run could have ended")
	assert.Less(t, shortGot, restarted+short+slack, "the short lease's lock waited for the long lease of another lock")

	f, err := lc.read(long + slack + replyTimeout)
	require.NoError(t, err)
	require.Equal(t, protocol.MsgAcquired, f.Type, "got %v", f)
	got := time.Since(killed)
	assert.GreaterOrEqual(t, got, long, "granted before the long lease of the crashed run could have ended")
	assert.Less(t, got, restarted+long+slack)
	t.Logf("after the kill: restarted %v, short lease's lock granted %v, long lease's lock %v",
		restarted.Round(time.Millisecond), shortGot.Round(time.Millisecond), got.Round(time.Millisecond))
}

// SIGTERM, with holders and a waiter that take their ERROR 0x01 and close:
// the restarted server grants at once, also the locks they held.
func TestBinarySIGTERMLeavesNothingToWaitFor(t *testing.T) {
	bin := testbin.Binary(t)
	dataDir := t.TempDir()
	p := startBinary(t, bin, "--data-dir", dataDir, "--admin", "off")
	a := dial(t, p.Addr)
	a.acquire("a", 20000)
	a.expectAcquired()
	w := dial(t, p.Addr)
	w.acquire("a", 20000)
	w.expectWaiting()
	b := dial(t, p.Addr)
	b.acquire("b", 5000)
	b.expectAcquired()

	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM))
	for _, c := range []*client{a, w, b} {
		c.expectError(protocol.ErrShuttingDown)
		c.expectClosed()
		c.conn.Close()
	}
	require.Equal(t, 0, p.WaitExit(binaryWait), p.LogText())

	q := startBinary(t, bin, "--data-dir", dataDir, "--admin", "off")
	for _, name := range []string{"a", "b", "c"} {
		c := dial(t, q.Addr)
		c.acquire(name, 60000)
		c.expectAcquired() // the first reply: no WAITING
	}
	assert.NotContains(t, q.LogText(), "wait out the leases of the previous run")
}

// SIGTERM while a holder is partitioned: it gets its ERROR 0x01 but never
// reads it nor closes, so nothing proves it knows. The restarted server
// holds that one lock back until the holder's lease would have run out,
// and grants every other at once.
func TestBinarySIGTERMKeepsTheWaitOfAHolderThatDidNotClose(t *testing.T) {
	const cutLease = 6 * time.Second
	bin := testbin.Binary(t)
	dataDir := t.TempDir()
	// The drain's linger (3 s of 4) ends before cut's lease: cut is cut,
	// with a second left to end its session on a loaded machine.
	p := startBinary(t, bin, "--data-dir", dataDir, "--admin", "off", "--drain-timeout", "4s")
	told := dial(t, p.Addr)
	told.acquire("told", 5000)
	told.expectAcquired()
	cut := dial(t, p.Addr)
	cut.acquire("cut", uint32(cutLease.Milliseconds()))
	tok := cut.expectAcquired()
	sent := time.Now() // before the send: the server's lease runs from later
	cut.heartbeat()
	require.Equal(t, tok, cut.expectAcquired())

	// cut reads and writes nothing from here on, and keeps its socket open.
	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM))
	told.expectError(protocol.ErrShuttingDown)
	told.expectClosed()
	told.conn.Close()
	require.Equal(t, 0, p.WaitExit(binaryWait), "the drain closes the silent session after a linger: %s", p.LogText())

	q := startBinary(t, bin, "--data-dir", dataDir, "--admin", "off")
	for _, name := range []string{"told", "fresh"} {
		c := dial(t, q.Addr)
		c.acquire(name, 60000)
		c.expectAcquired()
	}
	c := dial(t, q.Addr)
	c.acquire("cut", 60000)
	c.expectWaiting()
	c.expectAcquired()
	got := time.Since(sent)
	assert.GreaterOrEqual(t, got, cutLease, "granted before the lease of the holder that did not close could have ended")
	assert.Less(t, got, cutLease+slack)
}
