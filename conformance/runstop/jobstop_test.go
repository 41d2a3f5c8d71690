//go:build linux

package runstop

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/conformance/proxy"
	"github.com/monolock/monolock/go/testkit/pty"
)

// ticking is a command that also shows that it works: besides the
// processes of c, one of them appends a line to ./ticks every 20 ms.
func ticking(c command) command {
	return command{
		name:   c.name,
		script: "(while :; do echo tick >> ticks; sleep 0.02; done) & echo $! >> pids\n" + c.script,
		procs:  c.procs + 1,
	}
}

// stoppedAll waits until every process of procs is stopped (state T).
func stoppedAll(t *testing.T, procs []proc) {
	deadline := time.Now().Add(slack)
	for _, p := range procs {
		for {
			state, there := p.stat()
			require.True(t, there, "pid %d ended before it was stopped", p.pid)
			if state == "T" {
				break
			}
			require.True(t, time.Now().Before(deadline), "pid %d was not stopped with monolock run (state %s)", p.pid, state)
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func fileSize(t *testing.T, path string) int64 {
	st, err := os.Stat(path)
	require.NoError(t, err)
	return st.Size()
}

// TestCtrlZStopsTheWork: in an interactive shell, Ctrl-Z on a monolock run
// whose stdin is not the terminal (so its command is not in the terminal's
// foreground group and gets no SIGTSTP of its own) stops the command's
// whole tree with monolock run, at once; a stop that outlives the lease
// ends in a loss in which no process of the command is left when the
// server grants the lock to the next claim, and none worked after the stop.
func TestCtrlZStopsTheWork(t *testing.T) {
	srv := startServer(t)
	for _, c := range commands {
		t.Run(c.name, func(t *testing.T) {
			c := ticking(c)
			name := "runstop/ctrl-z/" + c.name
			dir := t.TempDir()
			script := fmt.Sprintf(`set -m; %s run --server %s --lease %s %s -- sh -c %s < /dev/null; echo "stopped:$?"; read go; fg; echo "status:$?"`,
				monolockBin, srv.addr, lease, name, shellQuote(c.script))
			term := pty.Start(t, dir, slack, "bash", "--norc", "--noprofile", "-c", script)
			procs := waitProcs(t, dir, c.procs, term.Exited(), term.Output)
			waiter := queueWaiter(t, srv.addr, name, procs)

			term.Type("\x1a")
			term.WaitOutput("stopped:") // the shell has its prompt back
			stoppedAll(t, procs)
			ticks := fileSize(t, filepath.Join(dir, "ticks"))

			awaitGrantWithNoSurvivor(t, waiter)
			assert.Equal(t, ticks, fileSize(t, filepath.Join(dir, "ticks")), "the command worked after Ctrl-Z")

			term.Type("\n") // fg: monolock run finds its lock lost
			term.WaitOutput(fmt.Sprintf("status:%d", exitLockLost))
			assert.Contains(t, term.Output(), "the watchdog killed the command at its deadline, monolock run having been stopped")
		})
	}
}

// TestSIGSTOPOfRunAlone: SIGSTOP, which no handler sees, of monolock run
// alone, while its link is blackholed: the watchdog kills the command's
// whole tree at its deadline, so none of it is left when the server grants
// the lock to the next claim.
func TestSIGSTOPOfRunAlone(t *testing.T) {
	srv := startServer(t)
	for _, c := range commands {
		t.Run(c.name, func(t *testing.T) {
			name := "runstop/sigstop/" + c.name
			p, err := proxy.Listen(srv.addr, time.Now())
			require.NoError(t, err)
			t.Cleanup(p.Close)
			dir := t.TempDir()
			run := startRun(t, dir, "--server", p.Addr(), "--lease", lease.String(), name, "--", "sh", "-c", c.script)
			procs := waitProcs(t, dir, c.procs, run.exited, run.output)
			waiter := queueWaiter(t, srv.addr, name, procs)

			p.Set(proxy.Faults{Blackhole: [2]bool{true, true}})
			require.NoError(t, run.cmd.Process.Signal(syscall.SIGSTOP))
			t.Cleanup(func() { _ = run.cmd.Process.Signal(syscall.SIGCONT) })

			awaitGrantWithNoSurvivor(t, waiter)

			require.NoError(t, run.cmd.Process.Signal(syscall.SIGCONT))
			assert.Equal(t, exitLockLost, run.wait(t, lease+slack))
			assert.Contains(t, run.output(), "the watchdog killed the command at its deadline, monolock run having been stopped")
		})
	}
}

// awaitGrantWithNoSurvivor waits for the waiter's grant after a stop of
// monolock run, and checks that no process of the command was there then.
func awaitGrantWithNoSurvivor(t *testing.T, waiter <-chan grant) {
	t.Helper()
	var g grant
	select {
	case g = <-waiter:
	case <-time.After(2*lease + slack):
		t.Fatalf("the waiter was not granted within %v of the stop", 2*lease+slack)
	}
	require.NoError(t, g.err)
	assert.Empty(t, g.survivors, "processes of the command still there when the waiter was granted")
}

// shellQuote quotes s as one word for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
