package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// monolockBinary returns the real monolock binary: $MONOLOCK_BIN if set,
// else a fresh build of ./cmd/monolock.
func monolockBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("MONOLOCK_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "monolock")
	cmd := exec.Command("go", "build", "-o", bin, "../../cmd/monolock")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// process is a running `monolock serve`.
type process struct {
	cmd    *exec.Cmd
	addr   string
	stderr *strings.Builder
	mu     *sync.Mutex
	exited chan struct{}
}

var listeningLine = regexp.MustCompile(`level=INFO msg=listening addr=(\S+)`)

// startBinary runs `monolock serve` on a free loopback port and returns once
// it has logged its address.
func startBinary(t *testing.T, bin string, args ...string) *process {
	t.Helper()
	return startBinaryEnv(t, bin, nil, args...)
}

// startBinaryEnv is startBinary with extra environment variables.
func startBinaryEnv(t *testing.T, bin string, env []string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	p := &process{cmd: cmd, stderr: &strings.Builder{}, mu: &sync.Mutex{}, exited: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		// Keep reading to the end so the process never blocks on its log.
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.stderr.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			if m := listeningLine.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		_ = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
	})
	select {
	case p.addr = <-addr:
	case <-p.exited:
		t.Fatalf("monolock serve exited early: %s", p.log())
	case <-time.After(30 * time.Second):
		t.Fatalf("monolock serve did not log its address: %s", p.log())
	}
	return p
}

func (p *process) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// wait waits for the process to exit and returns its exit code.
func (p *process) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("monolock serve did not exit: %s", p.log())
	}
	return p.cmd.ProcessState.ExitCode()
}

// Tokens never go backwards across kill -9 and a restart on the same data
// directory, also when the crash happens in the middle of a reserved block.
func TestBinaryTokensMonotonicAcrossKill9(t *testing.T) {
	bin := monolockBinary(t)
	dataDir := filepath.Join(t.TempDir(), "state")
	var highest uint64
	for run := 0; run < 3; run++ {
		p := startBinary(t, bin, "--data-dir", dataDir)
		for i := 0; i < 5; i++ {
			c := dial(t, p.addr)
			c.acquire(fmt.Sprintf("crash-%d-%d", run, i), 60000)
			tok := c.expectAcquired()
			require.Greater(t, tok, highest, "run %d grant %d", run, i)
			highest = tok
			c.conn.Close()
		}
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
		p.wait(t)
	}
	t.Logf("highest token after 3 crashes: %d", highest)
}

func TestBinarySIGTERMIsGraceful(t *testing.T) {
	bin := monolockBinary(t)
	p := startBinary(t, bin, "--data-dir", t.TempDir())
	ts := &testServer{addr: p.addr}
	holder := dial(t, ts.addr)
	holder.acquire("term", 60000)
	holder.expectAcquired()
	waiter := dial(t, ts.addr)
	waiter.acquire("term", 60000)
	waiter.expectWaiting()

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	for _, c := range []*client{holder, waiter} {
		c.expectError(protocol.ErrShuttingDown)
		c.expectClosed()
		c.conn.Close()
	}
	assert.Equal(t, 0, p.wait(t), p.log())
}

func TestBinaryFlags(t *testing.T) {
	bin := monolockBinary(t)
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
	c := dial(t, p.addr)
	c.acquire("xdg", 60000)
	c.expectAcquired()
	_, err := os.Stat(filepath.Join(state, "monolock", "token-hwm"))
	assert.NoError(t, err, "token mark in $XDG_STATE_HOME/monolock")
	c.conn.Close()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	assert.Equal(t, 0, p.wait(t), p.log())
}
