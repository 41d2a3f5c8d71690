//go:build unix

package runcmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseModes(t *testing.T) {
	t.Setenv("MONOLOCK_SERVER", "")
	for _, tc := range []struct {
		args   []string
		shared bool
		limit  int
	}{
		{[]string{"n", "--", "true"}, false, 0},
		{[]string{"-x", "n", "--", "true"}, false, 0},
		{[]string{"-e", "n", "--", "true"}, false, 0},
		{[]string{"-s", "n", "--", "true"}, true, 0},
		{[]string{"--shared", "n", "--", "true"}, true, 0},
		{[]string{"-sn", "n", "--", "true"}, true, 0},
		{[]string{"--limit", "3", "n", "--", "true"}, false, 3},
		{[]string{"-s", "--limit=65535", "n", "--", "true"}, true, 65535},
	} {
		o, err := parse(tc.args, nil)
		require.NoError(t, err, "%q", tc.args)
		assert.Equal(t, tc.shared, o.shared, "%q", tc.args)
		assert.Equal(t, tc.limit, o.limit, "%q", tc.args)
		assert.Equal(t, tc.shared || tc.limit > 0, len(o.claimOptions()) == 1, "%q", tc.args)
	}
	for bad, want := range map[string][]string{
		"exclude each other":     {"-s", "-x", "n", "--", "true"},
		"does not go with":       {"-x", "--limit", "2", "n", "--", "true"},
		"from 1 to 65535":        {"--limit", "65536", "n", "--", "true"},
		"permits from 1 to 6553": {"--limit", "-1", "n", "--", "true"},
	} {
		_, err := parse(want, nil)
		require.Error(t, err, "%q", want)
		assert.Contains(t, err.Error(), bad)
	}
}

// Two readers (-s) run at once; a writer runs alone; a semaphore of 2
// (--limit 2) runs two of three at once. Each command records how many of
// its kind run beside it through a shared directory.
func TestRunSharedReadersWriterAndSemaphore(t *testing.T) {
	srv := startServer(t)
	dir := t.TempDir()
	// Each command: announce itself, wait until told to go, then leave.
	script := `touch "in.$1"; while [ ! -e go ]; do sleep 0.01; done; rm "in.$1"`
	r1 := startRun(t, dir, "--server", srv.Addr, "-s", "rw", "--", "sh", "-c", script, "sh", "r1")
	r2 := startRun(t, dir, "--server", srv.Addr, "-s", "rw", "--", "sh", "-c", script, "sh", "r2")
	require.Eventually(t, func() bool {
		return exists(dir, "in.r1") && exists(dir, "in.r2")
	}, wait, 5*waitStep, "two readers at once")
	w := startRun(t, dir, "--server", srv.Addr, "-v", "rw", "--", "sh", "-c", script, "sh", "w")
	require.Eventually(t, func() bool { return contains(w.out, "waiting for the lock") }, wait, waitStep)
	r3 := startRun(t, dir, "--server", srv.Addr, "-v", "-s", "rw", "--", "sh", "-c", script, "sh", "r3")
	require.Eventually(t, func() bool { return contains(r3.out, "waiting for the lock") }, wait, waitStep,
		"a reader behind the waiting writer waits")
	assert.False(t, exists(dir, "in.w"))
	touch(t, dir, "go")
	for _, p := range []*runProc{r1, r2, w, r3} {
		require.Equal(t, 0, p.status(t), p.out.String())
	}

	sem := t.TempDir()
	count := `n=$(ls "$2" | grep -c '^in\.'); [ "$n" -le 1 ] || { echo "too many: $n" >&2; exit 9; }; ` + script
	var procs []*runProc
	for _, id := range []string{"a", "b", "c"} {
		procs = append(procs, startRun(t, sem, "--server", srv.Addr, "--limit", "2", "pool", "--", "sh", "-c", count, "sh", id, sem))
	}
	require.Eventually(t, func() bool {
		n := 0
		for _, id := range []string{"a", "b", "c"} {
			if exists(sem, "in."+id) {
				n++
			}
		}
		return n == 2
	}, wait, waitStep, "two permits taken")
	code, out := run(t, sem, "--server", srv.Addr, "--limit", "3", "pool", "--", "true")
	assert.Equal(t, ExitRefused, code, out)
	assert.Contains(t, out, "limit 3 differs from the limit 2")
	touch(t, sem, "go")
	for _, p := range procs {
		require.Equal(t, 0, p.status(t), p.out.String())
	}
}

const waitStep = 10 * time.Millisecond

func exists(dir, name string) bool {
	_, err := os.Stat(filepath.Join(dir, name))
	return err == nil
}

func touch(t *testing.T, dir, name string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), nil, 0o644))
}

func contains(out *syncBuffer, s string) bool { return strings.Contains(out.String(), s) }
