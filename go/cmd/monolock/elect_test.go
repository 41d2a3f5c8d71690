package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/monolock/monolock/go/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// monolock leader says by its exit status whether anyone leads, and
// prints the leader's value; monolock elect runs its command while it
// leads, with its value visible to followers; monolock observe --json
// prints one line per change.
func TestElectLeaderObserve(t *testing.T) {
	srv := startServe(t, nil)
	env := []string{"MONOLOCK_SERVER=" + srv.Addr}
	code, _, stderr := command(t, env, "leader", "svc")
	assert.Equal(t, leaderExitNone, code, stderr)
	assert.Contains(t, stderr, "no leader")

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	observe := exec.CommandContext(ctx, binary, "observe", "--json", "svc")
	observe.Env = append(cleanEnv(), env...)
	out, err := observe.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, observe.Start())
	defer func() { _ = observe.Process.Kill(); _ = observe.Wait() }()
	lines := bufio.NewScanner(out)
	next := func() map[string]any {
		t.Helper()
		require.True(t, lines.Scan(), "observe ended: %v", lines.Err())
		var o map[string]any
		require.NoError(t, json.Unmarshal(lines.Bytes(), &o), lines.Text())
		return o
	}
	assert.Equal(t, "no leader", next()["state"])

	code, stdout, stderr := command(t, env, "elect", "--value", "10.0.0.7:80", "svc", "--", binary, "leader", "svc")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "10.0.0.7:80\n", stdout, "the command ran while its value led")

	o := next()
	assert.Equal(t, "leader", o["state"])
	assert.Equal(t, "10.0.0.7:80", o["value"])
	assert.NotZero(t, o["token"])
	assert.Equal(t, "no leader", next()["state"], "the resign, once the command ended")

	code, _, stderr = command(t, env, "elect", "svc", "--", "true")
	assert.Equal(t, 64, code)
	assert.Contains(t, stderr, "--value is required")
	code, _, stderr = command(t, env, "elect", "--value", "x", "--shared", "svc", "--", "true")
	assert.Equal(t, 64, code)
	assert.Contains(t, stderr, "leads alone")
}

// A leader that cannot be reached is unknown, not "no leader".
func TestLeaderUnknownWithoutAServer(t *testing.T) {
	code, _, stderr := command(t, []string{"MONOLOCK_SERVER=127.0.0.1:1"}, "leader", "--timeout", "300ms", "svc")
	assert.Equal(t, leaderExitUnknown, code, stderr)
	assert.True(t, strings.Contains(stderr, "monolock leader:"), stderr)
}

// On SIGTERM, monolock elect stops its command first and resigns only
// once the command has exited: followers see the term end after the
// command's last work, never while it still runs.
func TestElectStopsTheCommandBeforeItResigns(t *testing.T) {
	srv := startServe(t, nil)
	done := filepath.Join(t.TempDir(), "stopped")
	script := `trap 'sleep 0.3; echo stopped > ` + done + `; exit 0' TERM; echo started; while :; do sleep 0.05; done`
	elect := exec.Command(binary, "elect", "--server", srv.Addr, "--value", "a", "svc", "--", "sh", "-c", script)
	elect.Env = cleanEnv()
	out, err := elect.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, elect.Start())
	defer func() { _ = elect.Process.Kill(); _ = elect.Wait() }()
	started := bufio.NewScanner(out)
	require.True(t, started.Scan(), "the command never started")

	c, err := client.New(client.WithServers(srv.Addr))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	obs, err := c.Observe(ctx, "svc")
	require.NoError(t, err)
	require.Equal(t, client.Leading, (<-obs).State)
	require.NoError(t, elect.Process.Signal(syscall.SIGTERM))
	for o := range obs {
		if o.State == client.Leading {
			continue
		}
		_, statErr := os.Stat(done)
		require.NoError(t, statErr, "the term ended (%v) before the command had stopped", o.State)
		break
	}
	require.NoError(t, elect.Wait())
}
