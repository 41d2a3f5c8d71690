package charts

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/monolock/monolock/bench/internal/overlap"
	"github.com/monolock/monolock/bench/internal/report"
	"github.com/monolock/monolock/bench/internal/safety"
	"github.com/monolock/monolock/bench/internal/stats"
	"github.com/monolock/monolock/bench/internal/workload"
)

// results has a cell or two of every section that has a chart.
func results() *report.Results {
	ms := time.Millisecond
	r := &report.Results{Started: time.Unix(0, 0), Cores: 2}
	for _, sys := range []string{"floor", "monolock", "redis"} {
		for _, w := range []int{1, 16} {
			r.Throughput = append(r.Throughput, report.ThroughputCell{System: sys, Workers: w,
				Stats: stats.Summary{Count: 100, PerSec: 1000 * float64(w), P50: ms, P99: 2 * ms}})
		}
		r.Handoff = append(r.Handoff, report.HandoffCell{System: sys, Workers: 16,
			Result: workload.HandoffResult{Latency: stats.Summary{Count: 10, PerSec: 10, P50: ms, P99: 3 * ms}}})
		r.Dead = append(r.Dead, report.DeadCell{System: sys,
			Result: workload.DeadResult{Lease: 2 * time.Second, Trials: 1, Samples: []time.Duration{1900 * ms}, Bound: 8 * time.Second}})
	}
	r.Idle = []report.IdleCell{{System: "monolock", Result: workload.IdleResult{Holders: 5000, Established: 5000, BytesPerHolder: 4000, CPUCores: 0.02, Window: 10 * time.Second}}}
	r.Clients = []report.ClientCell{
		{Client: "go", Workload: "uncontended", Workers: 1, Stats: stats.Summary{Count: 5, PerSec: 1000}},
		{Client: "go", Workload: "uncontended", Workers: 16, Stats: stats.Summary{Count: 5, PerSec: 4000}},
		{Client: "go", Workload: "handoff", Workers: 16, Stats: stats.Summary{Count: 5, PerSec: 2000}},
	}
	r.SafetyRun = &report.SafetyInfo{Lease: 2 * time.Second, Runs: 2, Delay: 3 * time.Second, Window: 10 * time.Second, Target: 0.15}
	for _, f := range safety.Faults {
		// One measured margin and one competitor that was never granted (on the edge).
		runs := []safety.Run{{HasTold: true, Told: 1600 * ms, HasGranted: true, Granted: 2000 * ms, Observed: 2000 * ms}, {Observed: 10 * time.Second}}
		r.Safety = append(r.Safety, report.SafetyCell{System: "monolock go", Monolock: true, Fault: f, Runs: runs, Summary: safety.Summarise(runs)})
	}
	r.OverlapRun = &report.OverlapInfo{Lease: 2 * time.Second, Runs: 2, Delay: 3 * time.Second, Job: 16 * time.Second, Window: 18 * time.Second, Every: 2 * ms, Gap: 0.05}
	for _, v := range overlap.Variants {
		// One clear run and one whose A still worked at the end (a bound).
		runs := []overlap.Run{{ALast: 1300 * ms, BFirst: 1700 * ms, HasB: true}, {ALast: 12 * time.Second, BFirst: 2 * time.Second, HasB: true, ARunning: true}}
		r.Overlap = append(r.Overlap, report.OverlapCell{Tool: "monolock run", Monolock: true, Variant: v, Fault: safety.Reset, Runs: runs, Summary: overlap.Summarise(runs)})
	}
	return r
}

func TestWriteDrawsEveryChartAsPNG(t *testing.T) {
	dir := t.TempDir()
	if err := report.Write(dir, results(), "", PNG{}); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(dir, "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"throughput.png", "throughput-latency.png", "handoff.png", "idle-memory.png", "idle-cpu.png", "dead-holder.png", "clients.png", "safety-margin.png", "work-overlap.png"} {
		checkPNG(t, filepath.Join(dir, "bench", f))
		if !strings.Contains(string(doc), "(bench/"+f+")") {
			t.Errorf("benchmarks.md does not show %s", f)
		}
	}
}

// A log chart whose every bar is 0 still draws (its floor is 1).
func TestDrawBarsAllZeroOnLogAxis(t *testing.T) {
	path := filepath.Join(t.TempDir(), "zero.png")
	c := report.BarChart{Title: "zero", YLabel: "per second (log)", Categories: []string{"a", "b"},
		Series: []report.Series{{Label: "s", Values: []float64{0, 0}}}, LogY: true, HLine: 8, HLabel: "target"}
	if err := (PNG{}).DrawBars(path, c); err != nil {
		t.Fatal(err)
	}
	checkPNG(t, path)
}

// checkPNG fails unless path is a PNG image of some size.
func checkPNG(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Errorf("%s: %v", filepath.Base(path), err)
		return
	}
	if b := img.Bounds(); b.Dx() < 100 || b.Dy() < 100 {
		t.Errorf("%s is %v", filepath.Base(path), b)
	}
}
