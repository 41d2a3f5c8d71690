package runcmd

import (
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseStat(t *testing.T) {
	// A name with spaces and parentheses: the fields follow the last ')'.
	p, err := parseStat([]byte("4242 (a) b (c)) D 17 4242 4242 0 -1 4194560 96 0 0 0 0 0 0 0 20 0 1 0 987654 2445312 224 18446744073709551615\n"))
	require.NoError(t, err)
	assert.Equal(t, proc{pid: 4242, ppid: 17, start: 987654, state: 'D', comm: "a) b (c)"}, p)
	for _, bad := range []string{"", "4242 (x", "x (y) S 1 2", "4242 (y) S one 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20"} {
		_, err := parseStat([]byte(bad))
		assert.Error(t, err, "%q", bad)
	}
	self, err := readProc(os.Getpid())
	require.NoError(t, err)
	assert.Equal(t, os.Getppid(), self.ppid)
	assert.True(t, sameProc(self))
	other := self
	other.start++
	assert.False(t, sameProc(other), "another start time is another process")
}

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
	require.NoError(t, becomeSubreaper())
	cmd := exec.Command("sh", "-c", `trap '' TERM; sleep 300 & (setsid sleep 300 &); wait`)
	cmd.SysProcAttr = procAttr()
	require.NoError(t, cmd.Start())
	c := newChild(cmd.Process.Pid)
	go c.reap()
	deadline := time.Now().Add(10 * time.Second)
	for !treeReady(descendants(os.Getpid())) {
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
func treeReady(ps []proc) bool {
	names := map[string]int{}
	for _, p := range ps {
		if p.state != 'Z' {
			names[p.comm]++
		}
	}
	return len(ps) == 3 && names["sh"] == 1 && names["sleep"] == 2
}

// Both ways of finding descendants find the same tree.
func TestDescendantsWalkAndScanAgree(t *testing.T) {
	require.True(t, hasChildrenLists(), "this kernel has no children lists: only the scan is tested")
	cmd := exec.Command("sh", "-c", `sleep 300 & sh -c 'sleep 300 & wait' & wait`)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		for _, p := range descendants(cmd.Process.Pid) {
			signalProc(p, syscall.SIGKILL)
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	pids := func(ps []proc) []int {
		var out []int
		for _, p := range ps {
			out = append(out, p.pid)
		}
		slices.Sort(out)
		return out
	}
	require.Eventually(t, func() bool { return len(live(descendants(cmd.Process.Pid))) == 3 }, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, pids(scanAll(cmd.Process.Pid)), pids(walkChildren(cmd.Process.Pid)))
}
