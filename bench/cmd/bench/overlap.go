package main

import (
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/monolock/monolock/bench/internal/overlap"
	"github.com/monolock/monolock/bench/internal/peeroverlap"
	"github.com/monolock/monolock/bench/internal/report"
	"github.com/monolock/monolock/bench/internal/safety"
	"github.com/monolock/monolock/bench/internal/systems"
)

// overlapGap is monolock run's target: A's last append at least this many
// leases before B's first.
const overlapGap = 0.05

// overlapOptions is workload 8's measurement, for the plan and -overlap-runs.
func (rn *runner) overlapOptions(self string) overlap.Options {
	lease := rn.plan.overlapLease
	return overlap.Options{
		Lease: lease,
		Runs:  rn.overlapRuns,
		Delay: lease * 3 / 2, // section 6's delay
		// Longer than a loss (0.8 × lease) plus monolock run's default
		// --grace of 10 s, so that a SIGKILL after the grace is seen
		// rather than the job's own end.
		Job:    8 * lease,
		Window: 9 * lease,
		Every:  2 * time.Millisecond,
		Faults: safety.Faults,
		Self:   self,
		Dir:    filepath.Join(rn.work, "overlap"),
	}
}

// overlap measures workload 8: the work of a command that holds a lock
// through `monolock run` or `etcdctl lock`, against the next holder's,
// when the first one's link fails.
func (rn *runner) overlap() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	o := rn.overlapOptions(self)
	start := time.Now()
	info := &report.OverlapInfo{Lease: o.Lease, Runs: o.Runs, Delay: o.Delay, Job: o.Job, Window: o.Window, Every: o.Every,
		Gap: overlapGap, Binary: monolockBinary(), SeparateRun: report.SeparateRun{Started: start, Command: commandLine(), LoadStart: loadavg()}}
	rn.r.OverlapRun = info
	defer func() {
		info.Duration = time.Since(start)
		info.LoadEnd = loadavg()
	}()
	fail := func(tool string, mono bool, msg string) {
		log.Printf("overlap    %-14s: %s", tool, msg)
		for _, v := range overlap.Variants {
			for _, f := range o.Faults {
				rn.r.Overlap = append(rn.r.Overlap, report.OverlapCell{Tool: tool, Monolock: mono, Variant: v, Fault: f, Err: msg})
			}
		}
	}
	if slices.Contains(rn.systems, systems.Monolock) {
		mono, err := rn.startMonolock("--admin", "127.0.0.1:0")
		if err != nil {
			fail("monolock run", true, "server did not start: "+err.Error())
		} else {
			tool := overlap.MonolockRun(rn.bin, mono.Addr, mono.AdminAddr, o.Lease)
			for _, v := range overlap.Variants {
				rn.overlapCells(tool, true, v, o)
				if rn.ctx.Err() != nil {
					break
				}
			}
			mono.Stop()
		}
	}
	if slices.Contains(rn.systems, systems.Etcd) && rn.ctx.Err() == nil {
		path, err := overlap.LookTool("etcdctl")
		if err != nil {
			fail("etcdctl lock", false, err.Error())
			return rn.ctx.Err()
		}
		info.Etcdctl = etcdctlVersion(path)
		tool, cli, err := peeroverlap.EtcdctlLock(path, o.Lease)
		if err != nil {
			fail("etcdctl lock", false, err.Error())
			return rn.ctx.Err()
		}
		defer cli.Close()
		for _, v := range overlap.Variants {
			rn.overlapCells(tool, false, v, o)
			if rn.ctx.Err() != nil {
				break
			}
		}
	}
	return rn.ctx.Err()
}

// overlapCells measures one tool and variant under every fault.
func (rn *runner) overlapCells(tool overlap.Tool, mono bool, v overlap.Variant, o overlap.Options) {
	t0 := time.Now()
	for _, c := range overlap.Measure(rn.ctx, tool, v, o) {
		s := overlap.Summarise(c.Runs)
		rn.r.Overlap = append(rn.r.Overlap, report.OverlapCell{Tool: tool.Name, Monolock: mono, Variant: v, Fault: c.Fault, Runs: c.Runs, Summary: s})
		line := "no overlap measured"
		if s.Measured > 0 {
			line = fmt.Sprintf("A's last − B's first min %v median %v max %v", s.Min.Round(time.Millisecond), s.Median.Round(time.Millisecond), s.Max.Round(time.Millisecond))
		}
		log.Printf("overlap    %-12s %-17s %-14s: %s  overlapping %d/%d  ran to its end %d  B never %d  failed %d %s",
			tool.Name, v, c.Fault, line, s.Overlapping, s.Runs, s.Ended, s.NoB, s.Failed, oneLineErr(s.FirstErr))
	}
	log.Printf("overlap    %-12s %-17s done in %v", tool.Name, v, time.Since(t0).Round(time.Second))
}

// monolockBinary says which monolock binary this run measures: the
// figures of `monolock run` are those of that build.
func monolockBinary() string {
	if bin := os.Getenv("MONOLOCK_BIN"); bin != "" {
		return "`" + bin + "` ($MONOLOCK_BIN)"
	}
	what := "built from ../go for this run"
	git, err := overlap.LookTool("git")
	if err != nil {
		return what
	}
	head, err := exec.Command(git, "-C", "..", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return what
	}
	what += ", commit " + strings.TrimSpace(string(head))
	if st, err := exec.Command(git, "-C", "..", "status", "--porcelain", "--", "go").Output(); err == nil && len(st) > 0 {
		what += " with uncommitted changes in go/"
	}
	return what
}

func etcdctlVersion(path string) string {
	out, err := exec.Command(path, "version").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
}
