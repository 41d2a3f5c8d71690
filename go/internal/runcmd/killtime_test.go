//go:build linux

package runcmd

// The measurement behind killAllowance: how long a SIGKILL sweep takes
// until every process of a tree is dead and reaped, and how late a timer
// fires, on this machine. Run it beside the load it should hold under, and
// without the tests (-run '^$'): it makes the test process a subreaper
// that reaps every child it has.
//
//	go test -run '^$' -bench 'KillTree|TimerLateness' -benchtime 60x ./internal/runcmd/
//
// docs/monolock-run.md has the figures.

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/proctree"
	"github.com/monolock/monolock/go/internal/runcmd/watchdog"
)

// hogEnv makes the test binary a helper that touches this many MiB of
// memory and then sleeps: the kind of process whose exit takes longest,
// since the kernel frees its pages before it can be reaped.
const hogEnv = "RUNCMD_TEST_HOG_MIB"

func init() {
	mib, err := strconv.Atoi(os.Getenv(hogEnv))
	if err != nil {
		return
	}
	mem := make([]byte, mib<<20)
	for i := 0; i < len(mem); i += 4096 {
		mem[i] = 1
	}
	time.Sleep(time.Hour)
	_ = mem[0]
}

// treeScript starts what the conformance test of monolock run starts: a
// shell that ignores SIGTERM with a child, and a daemon that left through
// setsid (double fork, so it is an orphan) with a child of its own; plus,
// with a hog, a process holding memory.
const treeScript = `trap '' TERM
sleep 300 &
(setsid sh -c 'sleep 300 & wait' &)
if [ -n "$HOG" ]; then "$HOG" & fi
wait`

// startTree starts the tree below this process and waits until it has
// want processes.
func startTree(b *testing.B, hogMiB int, want int) *child {
	cmd := exec.Command("sh", "-c", treeScript)
	cmd.SysProcAttr = watchdog.CommandAttr()
	cmd.Env = os.Environ()
	if hogMiB > 0 {
		cmd.Env = append(cmd.Env, "HOG="+os.Args[0], hogEnv+"="+strconv.Itoa(hogMiB))
	}
	require.NoError(b, cmd.Start())
	c := newChild(cmd.Process.Pid)
	go c.reap()
	deadline := time.Now().Add(30 * time.Second)
	for len(live(proctree.Descendants(os.Getpid()))) < want {
		require.True(b, time.Now().Before(deadline), "the tree did not start")
		time.Sleep(5 * time.Millisecond)
	}
	// Let the transient subshell go, and the hog touch its memory.
	time.Sleep(50 * time.Millisecond)
	time.Sleep(time.Duration(hogMiB) * time.Millisecond)
	return c
}

func live(ps []proctree.Proc) []proctree.Proc {
	return slices.DeleteFunc(ps, func(p proctree.Proc) bool { return p.State == 'Z' })
}

func BenchmarkKillTree(b *testing.B) {
	require.NoError(b, proctree.BecomeSubreaper())
	for _, hogMiB := range []int{0, 256, 1024} {
		want := 4
		if hogMiB > 0 {
			want++
		}
		b.Run(fmt.Sprintf("hog=%dMiB", hogMiB), func(b *testing.B) {
			var took []time.Duration
			for b.Loop() {
				b.StopTimer()
				c := startTree(b, hogMiB, want)
				b.StartTimer()
				start := time.Now()
				rep := newStopper(c, stopPlan{kill: start, leaseEnd: start.Add(time.Minute), giveUp: start.Add(time.Minute)}, nil).run()
				took = append(took, time.Since(start))
				require.Equal(b, stopReaped, rep.phase)
			}
			reportQuantiles(b, took, "kill")
		})
	}
}

// BenchmarkTimerLateness measures how late a 100 ms timer fires: the kill
// instant is a timer, and its lateness comes out of the allowance.
func BenchmarkTimerLateness(b *testing.B) {
	var late []time.Duration
	for b.Loop() {
		start := time.Now()
		t := time.NewTimer(100 * time.Millisecond)
		<-t.C
		late = append(late, time.Since(start)-100*time.Millisecond)
	}
	reportQuantiles(b, late, "late")
}

func reportQuantiles(b *testing.B, ds []time.Duration, what string) {
	slices.Sort(ds)
	q := func(f float64) float64 { return float64(ds[int(f*float64(len(ds)-1))]) / 1e6 }
	b.ReportMetric(q(0.5), what+"-p50-ms")
	b.ReportMetric(q(0.99), what+"-p99-ms")
	b.ReportMetric(q(1), what+"-max-ms")
	b.ReportMetric(0, "ns/op")
}
