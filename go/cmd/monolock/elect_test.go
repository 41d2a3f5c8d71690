package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

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
