package runcmd

import (
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/proctree"
	"github.com/monolock/monolock/go/internal/runcmd/watchdog"
)

// overdueEnv makes the test binary the helper of
// TestStopReportsWhatOutlivesTheLease: it stands in for monolock run (a
// subreaper that waits for every child), which the test process must not
// be, or it would reap the children of other tests.
const overdueEnv = "RUNCMD_TEST_OVERDUE_HELPER"

// TestStopReportsWhatOutlivesTheLease: processes still alive when the
// stop gives up are told one by one with pid, name and state, and
// counted. Here they outlive it because the plan gives up before its
// SIGKILL; a process in uninterruptible sleep would, with any plan.
func TestStopReportsWhatOutlivesTheLease(t *testing.T) {
	if os.Getenv(overdueEnv) != "" {
		overdueHelper(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestStopReportsWhatOutlivesTheLease$")
	cmd.Env = append(os.Environ(), overdueEnv+"=1")
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	text := string(out)
	assert.Regexp(t, `(?m)^monolock run: pid \d+ \(sh\) is still alive, in state \S+, when the lock can pass on; only the fencing token protects against it now$`, text)
	assert.Len(t, regexp.MustCompile(`(?m)^monolock run: pid \d+ \(sleep\) is still alive`).FindAllString(text, -1), 2, text)
	assert.Contains(t, text, "monolock run: command not fully stopped: 3 of 3 processes still alive when the lock can pass on (0 got SIGKILL)\n")
	assert.Contains(t, text, "monolock run: command stopped: 3 processes dead and reaped (3 needed SIGKILL)")
}

// overdueHelper starts a tree that ignores SIGTERM, one process of it
// outside the group (setsid), stops it with a plan that gives up before
// its SIGKILL, then stops it for real.
func overdueHelper(t *testing.T) {
	require.NoError(t, proctree.BecomeSubreaper())
	cmd := exec.Command("sh", "-c", `trap '' TERM; sleep 300 & (setsid sleep 300 &); wait`)
	cmd.SysProcAttr = watchdog.CommandAttr()
	require.NoError(t, cmd.Start())
	c := newChild(cmd.Process.Pid)
	go c.reap()
	deadline := time.Now().Add(10 * time.Second)
	for !treeReady(proctree.Descendants(os.Getpid())) {
		require.True(t, time.Now().Before(deadline), "the tree did not start")
		time.Sleep(5 * time.Millisecond)
	}
	r := &runner{log: slog.New(newHumanHandler(os.Stdout, slog.LevelWarn))}
	now := time.Now()
	r.reportStop(newStopper(c, stopPlan{kill: now.Add(time.Hour), leaseEnd: now.Add(100 * time.Millisecond), giveUp: now.Add(100 * time.Millisecond)}, nil).run())
	now = time.Now()
	rep := newStopper(c, stopPlan{kill: now, leaseEnd: now.Add(10 * time.Second), giveUp: now.Add(10 * time.Second)}, nil).run()
	r.reportStop(rep)
	require.Equal(t, stopReaped, rep.phase)
}

// treeReady: the shell and both sleeps run, and the subshell between them
// has gone.
func treeReady(ps []proctree.Proc) bool {
	names := map[string]int{}
	for _, p := range ps {
		if p.State != 'Z' {
			names[p.Comm]++
		}
	}
	return len(ps) == 3 && names["sh"] == 1 && names["sleep"] == 2
}
