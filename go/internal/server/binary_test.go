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
