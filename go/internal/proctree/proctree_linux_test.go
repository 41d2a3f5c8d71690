package proctree

import (
	"os"
	"os/exec"
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
	assert.Equal(t, Proc{Pid: 4242, PPid: 17, Start: 987654, State: 'D', Comm: "a) b (c)"}, p)
	for _, bad := range []string{"", "4242 (x", "x (y) S 1 2", "4242 (y) S one 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20"} {
		_, err := parseStat([]byte(bad))
		assert.Error(t, err, "%q", bad)
	}
	self, err := Read(os.Getpid())
	require.NoError(t, err)
	assert.Equal(t, os.Getppid(), self.PPid)
	assert.True(t, Same(self))
	other := self
	other.Start++
	assert.False(t, Same(other), "another start time is another process")
}

// live leaves out the zombies.
func live(ps []Proc) []Proc {
	return slices.DeleteFunc(ps, func(p Proc) bool { return p.State == 'Z' })
}

// Both ways of finding descendants find the same tree.
func TestDescendantsWalkAndScanAgree(t *testing.T) {
	require.True(t, hasChildrenLists(), "this kernel has no children lists: only the scan is tested")
	cmd := exec.Command("sh", "-c", `sleep 300 & sh -c 'sleep 300 & wait' & wait`)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		for _, p := range Descendants(cmd.Process.Pid) {
			Signal(p, syscall.SIGKILL)
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	pids := func(ps []Proc) []int {
		var out []int
		for _, p := range ps {
			out = append(out, p.Pid)
		}
		slices.Sort(out)
		return out
	}
	require.Eventually(t, func() bool { return len(live(Descendants(cmd.Process.Pid))) == 3 }, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, pids(scanAll(cmd.Process.Pid)), pids(walkChildren(cmd.Process.Pid)))
}
