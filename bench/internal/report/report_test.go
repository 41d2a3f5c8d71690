package report

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/monolock/monolock/bench/internal/safety"
	"github.com/monolock/monolock/bench/internal/stats"
	"github.com/monolock/monolock/bench/internal/systems"
	"github.com/monolock/monolock/bench/internal/workload"
)

// sample is a small but complete set of results.
func sample() *Results {
	r := &Results{Started: time.Unix(0, 0), Command: "cd bench && go run ./cmd/bench", Cores: 2, LoadStart: "0.1 / 0.1 / 0.1", LoadEnd: "0.1 / 0.1 / 0.1"}
	for _, sys := range []string{"monolock", "redis", "etcd"} {
		for _, w := range []int{1, 16} {
			r.Throughput = append(r.Throughput, ThroughputCell{System: sys, Workers: w,
				Stats: stats.Summary{Count: 100, PerSec: map[string]float64{"monolock": 1000, "redis": 800, "etcd": 100}[sys], P50: time.Millisecond, P99: 2 * time.Millisecond}})
		}
		r.Handoff = append(r.Handoff, HandoffCell{System: sys, Workers: 16, Result: workload.HandoffResult{
			Latency: stats.Summary{Count: 10, PerSec: 10, P50: time.Millisecond, P99: map[string]time.Duration{"monolock": time.Millisecond, "redis": 50 * time.Millisecond, "etcd": 5 * time.Millisecond}[sys]}}})
		r.Dead = append(r.Dead, DeadCell{System: sys, Result: workload.DeadResult{Lease: 2 * time.Second, Trials: 1, Samples: []time.Duration{1900 * time.Millisecond}, Bound: 8 * time.Second}})
	}
	r.Handoff = append(r.Handoff, HandoffCell{System: "postgres", Workers: 16, Result: workload.HandoffResult{
		Latency: stats.Summary{Count: 10, PerSec: 10, P50: 2 * time.Millisecond, P99: 500 * time.Microsecond}}})
	// Memory grows by 2 MB + 3.5 KiB per session, CPU by 0.4 cores per 100k.
	idle := func(n int) IdleCell {
		return IdleCell{System: "monolock", Result: workload.IdleResult{Holders: n, Established: n,
			BytesPerHolder: (2e6 + float64(n)*3584) / float64(n), CPUCores: 0.4 * float64(n) / 1e5, Window: 10 * time.Second, Refreshes: int64(4 * n)}}
	}
	r.Idle = []IdleCell{idle(5000), idle(20000), {System: "monolock", Result: workload.IdleResult{Holders: 100000}, Err: "not run: file limit"}}
	cycles := func(client, wl string, workers int, perSec float64) ClientCell {
		return ClientCell{Client: client, Workload: wl, Workers: workers, Stats: stats.Summary{Count: 5, PerSec: perSec}}
	}
	r.Clients = []ClientCell{
		cycles("go", "uncontended", 1, 1000), cycles("go", "uncontended", 16, 4000), cycles("go", "handoff", 16, 2000),
		cycles("node", "uncontended", 1, 900), cycles("node", "uncontended", 16, 3000), cycles("node", "handoff", 16, 1600),
		cycles("python-sync", "uncontended", 1, 500), cycles("python-sync", "uncontended", 16, 999),
	}
	addSafety(r)
	return r
}

// addSafety gives r a safety section: monolock node safe everywhere but on
// the reset, etcd unsafe under one fault, postgres never granted.
func addSafety(r *Results) {
	ms := time.Millisecond
	r.SafetyRun = &SafetyInfo{Lease: 2 * time.Second, Runs: 3, Delay: 3 * time.Second, Window: 10 * time.Second, Target: 0.15}
	both := func(told, granted time.Duration) safety.Run {
		return safety.Run{HasTold: true, Told: told, HasGranted: true, Granted: granted, Observed: granted}
	}
	cell := func(sys string, mono bool, f safety.Fault, runs ...safety.Run) {
		r.Safety = append(r.Safety, SafetyCell{System: sys, Monolock: mono, Signal: "sig " + sys, Fault: f, Runs: runs, Summary: safety.Summarise(runs)})
	}
	for _, f := range safety.Faults {
		if f == safety.Reset {
			cell("monolock node", true, f, both(ms, ms+300*time.Microsecond), both(2*ms, ms), both(ms, 2*ms))
			continue
		}
		cell("monolock node", true, f, both(1600*ms, 2000*ms), both(1500*ms, 1910*ms), both(1200*ms, 1601*ms))
	}
	cell("etcd", false, safety.BlackholeUp, both(2600*ms, 1800*ms), both(2000*ms, 2300*ms),
		safety.Run{HasGranted: true, Granted: 2 * time.Second, Observed: 12 * time.Second})
	cell("postgres", false, safety.BlackholeUp, safety.Run{Observed: 10 * time.Second}, safety.Run{Observed: 10 * time.Second}, safety.Run{Err: "holder: refused"})
}

func TestWriteProducesDocAndCharts(t *testing.T) {
	dir := t.TempDir()
	if err := Write(dir, sample(), "## What limited the results\n\ntext", newTestDrawer()); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(dir, "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	for _, want := range []string{
		"| uncontended cycles/s at 16 workers ≥ redis's | monolock 1000, redis 800 (1.25×) | met |",
		"| uncontended cycles/s at 16 workers ≥ 5× etcd's | monolock 1000, etcd 100 (10.0×) | met |",
		"| handoff p99 ≤ 1/10 of redis's (polling recipe) | monolock 1.00 ms, redis 50.0 ms | met |",
		"100000 asked, 0 established: not run: file limit | **missed** |",
		"| handoff p50 and p99 ≤ postgres's | p50: monolock 1.00 ms, postgres 2.00 ms (0.50×); p99: monolock 1.00 ms, postgres 500 µs (2.00×) | **missed** at p99 |",
		"| server memory per idle session under 4 KiB | 3.50 KiB per session added (slope over 5k–20k); growth ÷ sessions: 3.89 KiB at 5k, 3.60 KiB at 20k | met |",
		"| heartbeats of 19k idle sessions under 0.05 of a core | 0.080 cores at 20000 sessions (8000 heartbeats/s) | **missed** |",
		"least squares over 2 sizes (5k–20k): memory 1.9 MiB + 3.50 KiB per session, heartbeat CPU 0.000 + 0.40 cores per 100k sessions; at 100k: 3.52 KiB per session, 0.40 cores (extrapolated, not measured) | extrapolation under 4 KiB and half a core |",
		"| python-sync at 16 threads ≥ 2× its 1-thread rate | 999 vs 500 cycles/s (1.99×) | **missed** |",
		"| node ≥ 0.8× the go client (per second, same cells) | 1 worker 0.90×; 16 workers 0.75×; handoff 0.80× | **missed** at 16 workers |",
		"| dead holder: grant within lease + 10 ms | worst 1.90 s for a 2.00 s lease over 1 trials | met |",
		"## 5. Clients",
		"## 6. Safety margin under link faults",
		"| system | holder's signal | blackhole holder → server | blackhole server → holder | blackhole both ways | +3.00 s delay server → holder | reset |",
		"| monolock node | sig monolock node | +400 ms / +401 ms / +410 ms · 0/3 unsafe | +400 ms / +401 ms / +410 ms · 0/3 unsafe |",
		" −1.0 ms / +300 µs / +1.0 ms · **1/3 unsafe** |",
		"| etcd | sig etcd | −800 ms / −250 ms / +300 ms · **2/3 unsafe** (1 not told within 10.00 s of the grant) | not run |",
		"| postgres | sig postgres | 0/2 unsafe · 2 not granted within 10.00 s (holder told in 0 of them) · 1 failed: holder: refused |",
		"| safety margin under link faults ≥ +300 ms (+0.15 × lease), 0 unsafe runs, every client, every fault | worst margin −1.0 ms (monolock node, reset); 1 of 15 runs unsafe; 1 cells below target: monolock node, reset (1/3 unsafe, min −1.0 ms) | **missed** |",
		"![safety margin of every run, by recipe and fault](bench/safety-margin.png)",
		"## What limited the results",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("benchmarks.md lacks %q", want)
		}
	}
	for _, f := range []string{"throughput.png", "handoff.png", "idle-memory.png", "idle-cpu.png", "dead-holder.png", "clients.png", "safety-margin.png", "results.json"} {
		st, err := os.Stat(filepath.Join(dir, "bench", f))
		if err != nil || st.Size() == 0 {
			t.Errorf("%s missing or empty: %v", f, err)
		}
		if strings.HasSuffix(f, ".png") && !strings.Contains(text, "(bench/"+f+")") {
			t.Errorf("benchmarks.md does not show %s", f)
		}
	}
}

func TestDeadFiguresCountMissesAsBound(t *testing.T) {
	m, w := deadFigures(workload.DeadResult{Bound: 8 * time.Second, Missed: 1, Samples: []time.Duration{time.Second}})
	if m != time.Second || w != 8*time.Second {
		t.Fatalf("median %v worst %v", m, w)
	}
}

func TestSafetyTargetMetWhenEveryMonolockCellIsSafeAndWide(t *testing.T) {
	r := &Results{}
	addSafety(r)
	var kept []SafetyCell
	for _, c := range r.Safety {
		if c.Fault != safety.Reset {
			kept = append(kept, c)
		}
	}
	r.Safety = kept
	row, met, ok := safetyTarget(r)
	if !ok || !met {
		t.Fatalf("target not met: %s", row)
	}
	if !strings.Contains(row, "worst margin +400 ms (monolock node, blackhole holder → server); 0 of 12 runs unsafe | met |") {
		t.Errorf("row %q", row)
	}
	// A peer's unsafe cells do not count against monolock's target; a
	// monolock cell with a run that saw no grant does.
	for i, c := range r.Safety {
		if c.System == "monolock node" && c.Fault == safety.DelayDown {
			runs := append(c.Runs[:2:2], safety.Run{HasTold: true, Told: time.Second, Observed: 10 * time.Second})
			r.Safety[i].Runs, r.Safety[i].Summary = runs, safety.Summarise(runs)
		}
	}
	if row, met, _ := safetyTarget(r); met || !strings.Contains(row, "monolock node, +3.00 s delay server → holder (2/3 runs measured)") {
		t.Errorf("row %q", row)
	}
}

func TestSignedMS(t *testing.T) {
	for d, want := range map[time.Duration]string{
		412 * time.Millisecond:   "+412 ms",
		-933 * time.Millisecond:  "−933 ms",
		-800 * time.Microsecond:  "−800 µs",
		-3200 * time.Microsecond: "−3.2 ms",
		0:                        "+0 µs",
		-8710 * time.Millisecond: "−8.71 s",
		12 * time.Second:         "+12.00 s",
	} {
		if got := signedMS(d); got != want {
			t.Errorf("signedMS(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestChartMarginPutsMissingEventsAtTheEdge(t *testing.T) {
	for _, c := range []struct {
		run      safety.Run
		x        float64
		edge, ok bool
	}{
		{safety.Run{HasTold: true, Told: time.Second, HasGranted: true, Granted: 1400 * time.Millisecond}, 400, false, true},
		{safety.Run{HasTold: true, Told: 10 * time.Second, HasGranted: true, Granted: time.Second}, -2000, true, true},
		{safety.Run{HasGranted: true, Granted: time.Second}, -2000, true, true},
		{safety.Run{HasTold: true, Told: time.Second}, 2000, true, true},
		{safety.Run{}, 2000, true, true},
		{safety.Run{Err: "x"}, 0, false, false},
	} {
		x, edge, ok := chartMargin(c.run, 2000)
		if x != c.x || edge != c.edge || ok != c.ok {
			t.Errorf("%+v: %v %v %v, want %v %v %v", c.run, x, edge, ok, c.x, c.edge, c.ok)
		}
	}
}

// withFloor adds the floor and the bare client to sample: at 1 worker both
// monolock rows meet their targets, at 16 the Go client misses.
func withFloor() *Results {
	r := sample()
	cell := func(sys string, w int, perSec float64) ThroughputCell {
		return ThroughputCell{System: sys, Workers: w, Stats: stats.Summary{Count: 100, PerSec: perSec, P50: time.Millisecond, P99: 2 * time.Millisecond}}
	}
	r.Throughput = append([]ThroughputCell{
		cell(systems.Floor, 1, 1000), cell(systems.MonolockBare, 1, 960),
		cell(systems.Floor, 16, 2000), cell(systems.MonolockBare, 16, 1900),
	}, r.Throughput...)
	return r
}

// table returns the lines of the markdown table that follows header.
func table(t *testing.T, text, header string) []string {
	t.Helper()
	i := strings.Index(text, header)
	if i < 0 {
		t.Fatalf("no table %q", header)
	}
	var rows []string
	for _, line := range strings.Split(text[i:], "\n") {
		if !strings.HasPrefix(line, "|") {
			break
		}
		rows = append(rows, line)
	}
	return rows
}

func TestFloorColumnAndTargets(t *testing.T) {
	r := withFloor()
	r.Throughput = append(r.Throughput, ThroughputCell{System: "redis", Workers: 64, Err: "refused"})
	text := string(markdown(r, nil, ""))
	rows := table(t, text, "| system | workers | cycles/s | × floor |")
	for _, want := range []string{
		"| tcp floor | 1 | 1000 | 1.00× |",
		"| monolock serve, bare client | 1 | 960 | 0.96× |",
		"| monolock serve, Go client | 1 | 1000 | 1.00× |",
		"| redis | 1 | 800 | 0.80× |",
		"| monolock serve, Go client | 16 | 1000 | 0.50× |",
		"| etcd | 16 | 100 | 0.05× |",
		"| redis | 64 | failed: refused |",
	} {
		if !slices.ContainsFunc(rows, func(row string) bool { return strings.HasPrefix(row, want) }) {
			t.Errorf("section 1 lacks a row starting %q", want)
		}
	}
	// Every row, failed ones included, has the header's columns.
	for _, row := range rows[1:] {
		if strings.Count(row, "|") != strings.Count(rows[0], "|") {
			t.Errorf("row %q does not match header %q", row, rows[0])
		}
	}
	for _, want := range []string{
		"| monolock serve with the bare client ≥ 0.95× the tcp floor (uncontended cycles/s, every worker count) | 1 worker: 960 of the floor's 1000 (0.960×); 16 workers: 1900 of the floor's 2000 (0.950×) | met |",
		"| monolock serve with the Go client ≥ 0.9× the tcp floor (uncontended cycles/s, every worker count) | 1 worker: 1000 of the floor's 1000 (1.000×); 16 workers: 1000 of the floor's 2000 (0.500×) | **missed** at 16 workers |",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("targets lack %q", want)
		}
	}
	// Below 0.95 by a hair is a miss, and is not printed as 0.950.
	r.Throughput[3].Stats.PerSec = 1899
	if text := string(markdown(r, nil, "")); !strings.Contains(text, "16 workers: 1899 of the floor's 2000 (0.949×) | **missed** at 16 workers |") {
		t.Error("1899 of 2000 not reported as 0.949×, missed")
	}
}

func TestNoFloorNoColumn(t *testing.T) {
	text := string(markdown(sample(), nil, ""))
	rows := table(t, text, "| system | workers | cycles/s |")
	if strings.Contains(rows[0], "floor") || strings.Contains(text, "the tcp floor (uncontended") {
		t.Errorf("a run without the floor shows floor figures: %s", rows[0])
	}
	for _, row := range rows[1:] {
		if strings.Count(row, "|") != strings.Count(rows[0], "|") {
			t.Errorf("row %q does not match header %q", row, rows[0])
		}
	}
}

func TestFloorChartsAndIdleSystems(t *testing.T) {
	dir := t.TempDir()
	d := newTestDrawer()
	if err := Write(dir, withFloor(), "", d); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"throughput.png", "idle-memory.png"} {
		if st, err := os.Stat(filepath.Join(dir, "bench", f)); err != nil || st.Size() == 0 {
			t.Errorf("%s missing or empty: %v", f, err)
		}
	}
	// The throughput chart names the floor's rows (and every system of the
	// run, postgres with no bar); the idle chart has only the systems
	// measured idle, not the throughput-only ones.
	if got := d.bars["throughput.png"].Categories; !slices.Equal(got, []string{"tcp floor", "monolock, bare", "monolock, Go", "redis", "etcd", "postgres"}) {
		t.Errorf("throughput categories %q", got)
	}
	if got := d.bars["idle-memory.png"].Categories; !slices.Equal(got, []string{"monolock"}) {
		t.Errorf("idle-memory categories %q", got)
	}
}

func TestFailoverSectionGivesMinMedianMax(t *testing.T) {
	r := &Results{Failover: &FailoverSection{TTL: 2 * time.Second, Lease: 2 * time.Second,
		Monolock: []float64{4.1, 3.7, 3.9}, Raft: []float64{1.1}, Recipe: nil}}
	var b bytes.Buffer
	writeFailover(&b, r)
	out := b.String()
	for _, want := range []string{
		"## 7. Failover",
		"| monolock HA: kill -9 of the active server → the waiter's grant | 3 | 3.70 s | 3.90 s | 4.10 s |",
		"| etcd: kill -9 of the raft leader → a new leader | 1 | 1.10 s | 1.10 s | 1.10 s |",
		"| 0 | – | – | – |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	r.Failover.Err = "etcd not found"
	b.Reset()
	writeFailover(&b, r)
	if !strings.Contains(b.String(), "Not measured: etcd not found") {
		t.Errorf("an error is reported: %s", b.String())
	}
}

// A run with sessions states their targets against the peers it measured:
// Redis at 16 workers, PostgreSQL at one.
func TestSessionTargets(t *testing.T) {
	r := sample()
	cell := func(sys string, w int, perSec float64) ThroughputCell {
		return ThroughputCell{System: sys, Workers: w, Stats: stats.Summary{Count: 100, PerSec: perSec, P50: time.Millisecond, P99: 2 * time.Millisecond}}
	}
	r.Throughput = append(r.Throughput,
		cell(systems.MonolockSession, 1, 900), cell(systems.MonolockSession, 16, 5000),
		cell(systems.Postgres, 1, 1000), cell(systems.Redis, 16, 4000))
	text := string(markdown(r, nil, ""))
	for _, want := range []string{
		"| with a session, uncontended cycles/s at 16 workers ≥ redis's | monolock-session 5000, redis ",
		"| with a session, uncontended cycles/s at 1 worker ≥ postgres's | monolock-session 900, postgres 1000 (0.90×) | **missed** |",
		"| monolock serve, Go client, a session per worker | 16 | 5000 |",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}
