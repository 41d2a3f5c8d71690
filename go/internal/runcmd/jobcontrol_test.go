//go:build linux

package runcmd

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/proctree"
)

// jobScript is a command whose two processes, one outside its process
// group, append to ./ticks every 20 ms; their pids go to ./pids.
const jobScript = `(setsid sh -c 'echo $$ >> pids; while :; do echo b >> ticks; sleep 0.02; done' &)
echo $$ >> pids
while :; do echo a >> ticks; sleep 0.02; done`

// jobProcs waits until ./pids lists n processes and returns them.
func jobProcs(t *testing.T, dir string, n int) []proctree.Proc {
	t.Helper()
	pidFile := filepath.Join(dir, "pids")
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(pidFile)
		return len(strings.Fields(string(b))) == n
	}, wait, 5*time.Millisecond, "the command did not start")
	b, _ := os.ReadFile(pidFile)
	var out []proctree.Proc
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		require.NoError(t, err)
		p, err := proctree.Read(pid)
		require.NoError(t, err)
		out = append(out, p)
		t.Cleanup(func() { proctree.Signal(p, syscall.SIGKILL) })
	}
	return out
}

// waitStates waits until every process is in a state that stopped says.
func waitStates(t *testing.T, procs []proctree.Proc, stopped bool) {
	t.Helper()
	for _, p := range procs {
		require.Eventually(t, func() bool { return proctree.Stopped(p.Pid) == stopped }, wait, 5*time.Millisecond,
			"pid %d (%s): stopped should be %v", p.Pid, p.Comm, stopped)
	}
}

func ticks(t *testing.T, dir string) int64 {
	t.Helper()
	st, err := os.Stat(filepath.Join(dir, "ticks"))
	require.NoError(t, err)
	return st.Size()
}

// A job stop of monolock run (SIGTSTP to its process group, as a terminal's
// Ctrl-Z sends it when monolock run has the terminal and the command has
// not; or SIGTTIN) stops the command's whole tree, also what left its
// group, with monolock run; continuing monolock run continues the tree.
func TestRunJobStopStopsTheWholeTree(t *testing.T) {
	srv := startServer(t)
	for _, sig := range []syscall.Signal{syscall.SIGTSTP, syscall.SIGTTIN} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			p := startRunGroup(t, dir, "--server", srv.Addr, "--lease", "30s", "jobs/stop", "--", "sh", "-c", jobScript)
			procs := jobProcs(t, dir, 2)
			require.NoError(t, syscall.Kill(-p.cmd.Process.Pid, sig))
			waitStates(t, procs, true)
			waitStates(t, []proctree.Proc{{Pid: p.cmd.Process.Pid}}, true)
			stoppedAt := ticks(t, dir)
			time.Sleep(100 * time.Millisecond)
			assert.Equal(t, stoppedAt, ticks(t, dir), "the command worked while stopped")

			require.NoError(t, syscall.Kill(-p.cmd.Process.Pid, syscall.SIGCONT))
			waitStates(t, procs, false)
			require.Eventually(t, func() bool { return ticks(t, dir) > stoppedAt }, wait, 5*time.Millisecond, "the command did not go on")
			require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
			assert.Equal(t, 128+int(syscall.SIGTERM), p.status(t), p.out.String())
		})
	}
}

// startRunGroup is startRun in a process group of its own, as a shell
// with job control starts a job.
func startRunGroup(t *testing.T, dir string, args ...string) *runProc {
	t.Helper()
	return startRunWith(t, dir, &syscall.SysProcAttr{Setpgid: true}, args...)
}
