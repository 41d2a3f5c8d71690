//go:build unix

package runcmd

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// flock(1)'s spellings, as its users type them: attached values, combined
// short options, and -c "command string" after the name.
func TestParseFlockSpellings(t *testing.T) {
	t.Setenv("MONOLOCK_SERVER", "")
	t.Setenv("SHELL", "/bin/sh")
	for _, tc := range []struct {
		args     []string
		timeout  time.Duration
		noWait   bool
		conflict int
	}{
		{[]string{"-w1", "n", "--", "true"}, time.Second, false, ExitConflict},
		{[]string{"-w0.5", "n", "--", "true"}, 500 * time.Millisecond, false, ExitConflict},
		{[]string{"-w0", "n", "--", "true"}, 0, true, ExitConflict},
		{[]string{"-nw", "1", "n", "--", "true"}, time.Second, true, ExitConflict},
		{[]string{"-nw1", "n", "--", "true"}, time.Second, true, ExitConflict},
		{[]string{"-n", "-E1", "n", "--", "true"}, 0, true, 1},
		{[]string{"-nE", "1", "n", "--", "true"}, 0, true, 1},
		{[]string{"-vnE3", "n", "--", "true"}, 0, true, 3},
		{[]string{"-w", "2", "-E", "4", "n", "--", "true"}, 2 * time.Second, false, 4},
		{[]string{"--timeout=2", "--conflict-exit-code=4", "n", "--", "true"}, 2 * time.Second, false, 4},
		{[]string{"-timeout", "2", "-no-wait", "n", "--", "true"}, 2 * time.Second, true, ExitConflict},
		{[]string{"--server", "-nw", "n", "--", "true"}, 0, false, ExitConflict}, // a value, not flags
	} {
		o, err := parse(tc.args, nil)
		require.NoError(t, err, "%q", tc.args)
		assert.Equal(t, tc.timeout, o.timeout, "%q", tc.args)
		assert.Equal(t, tc.noWait, o.noWait, "%q", tc.args)
		assert.Equal(t, tc.conflict, o.conflictCode, "%q", tc.args)
		assert.Equal(t, "n", o.name, "%q", tc.args)
	}

	// -c "command string", as flock NAME -c: run by the shell.
	for _, args := range [][]string{
		{"n", "-c", "echo a; echo b"},
		{"n", "--command", "echo a; echo b"},
		{"-c", "echo a; echo b", "n"},
		{"-cecho a; echo b", "n"},
		{"--command=echo a; echo b", "n"},
		{"-nc", "echo a; echo b", "n"},
	} {
		o, err := parse(args, nil)
		require.NoError(t, err, "%q", args)
		assert.Equal(t, []string{"/bin/sh", "-c", "echo a; echo b"}, o.command, "%q", args)
		assert.Equal(t, "n", o.name, "%q", args)
	}
	t.Setenv("SHELL", "")
	o, err := parse([]string{"n", "-c", "true"}, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"/bin/sh", "-c", "true"}, o.command, "without $SHELL, as flock")

	for _, bad := range [][]string{
		{"n", "-c"}, {"n", "-c", "a", "b"}, {"-c", "a", "n", "--", "b"}, {"-c", "a", "n", "-c", "b"},
		{"-c", "", "n"}, {"-nq", "n", "--", "true"}, {"-w", "n", "--", "true"}, {"-E", "x", "n", "--", "true"},
	} {
		_, err := parse(bad, nil)
		assert.Error(t, err, "%q", bad)
	}
}

// -c runs the string with the shell and the lock's environment.
func TestRunCommandString(t *testing.T) {
	t.Setenv("SHELL", "/bin/sh")
	srv := startServer(t)
	dir := t.TempDir()
	code, out := run(t, dir, "--server", srv.Addr, "-nw30", "jobs/c", "-c", `echo "$MONOLOCK_NAME" > out; exit 3`)
	assert.Equal(t, 3, code, out)
	b, err := os.ReadFile(filepath.Join(dir, "out"))
	require.NoError(t, err)
	assert.Equal(t, "jobs/c\n", string(b))
}
