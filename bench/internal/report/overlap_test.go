package report

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/monolock/monolock/bench/internal/overlap"
	"github.com/monolock/monolock/bench/internal/safety"
)

// addOverlap gives r an overlap section: monolock run 400 ms clear of B
// everywhere but with the ignoring command under a reset, where A ran on
// after B started; etcdctl overlapping by the rest of the job.
func addOverlap(r *Results) {
	ms := time.Millisecond
	r.OverlapRun = &OverlapInfo{Lease: 2 * time.Second, Runs: 2, Delay: 3 * time.Second, Job: 16 * time.Second, Window: 18 * time.Second,
		Every: 2 * ms, Gap: 0.05, Binary: "built from ../go for this run", Etcdctl: "etcdctl version: 3.4.23"}
	// t is 300 ms before the fault: t + lease is at +1.70 s.
	run := func(aLast, bFirst time.Duration, exit int) overlap.Run {
		return overlap.Run{ALast: aLast, BFirst: bFirst, HasB: true, AExit: exit, T: -300 * ms, HasT: true}
	}
	cell := func(tool string, mono bool, v overlap.Variant, f safety.Fault, runs ...overlap.Run) {
		r.Overlap = append(r.Overlap, OverlapCell{Tool: tool, Monolock: mono, Variant: v, Fault: f, Runs: runs, Summary: overlap.Summarise(runs)})
	}
	for _, v := range overlap.Variants {
		for _, f := range safety.Faults {
			if v == overlap.IgnoresTerm && f == safety.Reset {
				late := run(11*time.Second, 1700*ms, 79)
				cell("monolock run", true, v, f, run(1300*ms, 1700*ms, 79), late)
				continue
			}
			cell("monolock run", true, v, f, run(1300*ms, 1700*ms, 79), run(1290*ms, 1710*ms, 79))
		}
	}
	ended := overlap.Run{ALast: 14 * time.Second, BFirst: 2 * time.Second, HasB: true, AEnded: true, AExit: 1, ASaid: "Error: context deadline exceeded"}
	cell("etcdctl lock", false, overlap.Plain, safety.BlackholeUp, ended, ended)
}

func TestOverlapSectionTablesTargetAndChart(t *testing.T) {
	r := sample()
	addOverlap(r)
	dir := t.TempDir()
	d := newTestDrawer()
	if err := Write(dir, r, "", d); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(dir, "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	for _, want := range []string{
		"## 8. Work overlap under link faults",
		"### Plain command (dies of SIGTERM)",
		"### Command that ignores SIGTERM",
		"| monolock run | blackhole holder → server | 2 | 0 | −420 ms / −410 ms / −400 ms | −0.21 / −0.20 / −0.20 | +1.29 s | +1.71 s | stopped (2) | 79 (2) |",
		"| monolock run | reset | 2 | **1** | −400 ms / +4.45 s / +9.30 s | −0.20 / +2.23 / +4.65 | +6.15 s | +1.70 s | stopped (2) | 79 (2) |",
		"| etcdctl lock | blackhole holder → server | 2 | **2** | +12.00 s / +12.00 s / +12.00 s | +6.00 / +6.00 / +6.00 | +14.00 s | +2.00 s | ran its whole job (2) | 1 (2) |",
		"| work overlap under link faults (`monolock run`): no overlap, the old command's last append ≥ 100 ms (0.05 × lease) before the new one's first, every command and fault | worst A's last − B's first +9.30 s (ignores SIGTERM, reset); 1 of 30 runs overlapping; 1 cells short of the target: ignores SIGTERM, reset (1/2 overlapping, max +9.30 s) | **missed** |",
		"| ignores SIGTERM | reset | 2 | +4.45 s / +9.30 s | +0 µs / +0 µs | 1 | 0 |",
		"- *ignores SIGTERM, reset*: A was stopped, but only after B had started: A's last append at +6.15 s, B's first at +1.70 s (medians, from the fault); A appended at or after *t* + lease in 1 of 2 runs (as late as *t* + lease +9.30 s): its last process was not dead by then.",
		"In this run's 2 overlapping runs etcdctl exited 1 in 2 (`Error: context deadline exceeded`).",
		"![A's last append minus B's first of every run, by tool, command and fault](bench/work-overlap.png)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("benchmarks.md lacks %q", want)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "bench", "work-overlap.png")); err != nil || st.Size() == 0 {
		t.Errorf("work-overlap.png missing or empty: %v", err)
	}

	// Without the late run every monolock cell is 400 ms clear: met.
	for i, c := range r.Overlap {
		if c.Monolock && c.Variant == overlap.IgnoresTerm && c.Fault == safety.Reset {
			runs := c.Runs[:1]
			r.Overlap[i].Runs, r.Overlap[i].Summary = runs, overlap.Summarise(runs)
		}
	}
	if row, ok := overlapTarget(r); !ok || !strings.HasSuffix(row, "0 of 29 runs overlapping | met |\n") {
		t.Errorf("row %q", row)
	}
	// A clear of B by 200 ms meets the target, yet appended 100 ms past
	// t + lease: the guarantee's first half is broken, and the text says so.
	late := []overlap.Run{{ALast: 1800 * time.Millisecond, BFirst: 2000 * time.Millisecond, HasB: true, T: -300 * time.Millisecond, HasT: true}}
	r.Overlap[1].Runs, r.Overlap[1].Summary = late, overlap.Summarise(late)
	var b bytes.Buffer
	writeMonolockMisses(&b, r)
	if want := "This run's binary met the target but not the guarantee in 1 cells:\n\n- *plain, blackhole server → holder*: A appended at or after *t* + lease in 1 of 1 runs (as late as *t* + lease +100 ms): its last process was not dead by then; in those runs B started later still, at *t* + lease +300 ms to +300 ms.\n"; !strings.Contains(b.String(), want) {
		t.Errorf("misses:\n%s\nwant\n%s", b.String(), want)
	}
	// A gap of 50 ms is no overlap, and still short of 0.05 × 2 s.
	r.Overlap[0].Runs = []overlap.Run{{ALast: time.Second, BFirst: 1050 * time.Millisecond, HasB: true}}
	r.Overlap[0].Summary = overlap.Summarise(r.Overlap[0].Runs)
	if row, _ := overlapTarget(r); !strings.Contains(row, "plain, blackhole holder → server (max −50 ms) | **missed** |") {
		t.Errorf("row %q", row)
	}
}

func TestOverlapChartRowsAndScale(t *testing.T) {
	r := sample()
	addOverlap(r)
	c := overlapChart(r)
	if want := []string{"monolock run, plain", "monolock run, ignores SIGTERM", "monolock run, setsid grandchild", "etcdctl lock, plain", "etcdctl lock, ignores SIGTERM", "etcdctl lock, setsid grandchild"}; !slices.Equal(c.Rows, want) {
		t.Errorf("rows %q, want %q", c.Rows, want)
	}
	// The scale spans the runs (+12 s of etcdctl's) and the lease before 0.
	if !(c.XMin < symlog(-2000) && c.XMax > symlog(12000)) {
		t.Errorf("x from %v to %v", c.XMin, c.XMax)
	}
	var labels []string
	for _, tk := range c.Ticks(c.XMin, c.XMax) {
		labels = append(labels, tk.Label)
	}
	if want := []string{"−1 s", "−100 ms", "−10 ms", "0", "+10 ms", "+100 ms", "+1 s", "+10 s"}; !slices.Equal(labels, want) {
		t.Errorf("ticks %q, want %q", labels, want)
	}
}

func TestSymlogKeepsSignAndOrder(t *testing.T) {
	if symlog(0) != 0 || symlog(-100) != -symlog(100) || !(symlog(10) < symlog(100) && symlog(100) < symlog(10000)) {
		t.Fatalf("symlog: %v %v %v %v", symlog(0), symlog(-100), symlog(100), symlog(10000))
	}
}
