package report

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/monolock/monolock/bench/internal/stats"
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
	r.Idle = []IdleCell{
		{System: "monolock", Result: workload.IdleResult{Holders: 10000, Established: 10000, BytesPerHolder: 6000, CPUCores: 0.05, Window: 10 * time.Second, Refreshes: 40000}},
		{System: "monolock", Result: workload.IdleResult{Holders: 100000}, Err: "not run: file limit"},
	}
	r.Clients = []ClientCell{{Client: "go", Workload: "uncontended", Workers: 1, Stats: stats.Summary{Count: 5, PerSec: 5}}}
	return r
}

func TestWriteProducesDocAndCharts(t *testing.T) {
	dir := t.TempDir()
	if err := Write(dir, sample(), "## What limited the results\n\ntext"); err != nil {
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
		"| under 8 KiB of server memory per session | 5.86 KiB at 10000 sessions | met at 10k; 100k not measured |",
		"a linear extrapolation gives 0.50 cores at 100k (not measured) | met at 10k; 100k not measured, extrapolation above the target |",
		"| dead holder: grant within lease + 10 ms | worst 1.90 s for a 2.00 s lease over 1 trials | met |",
		"## 5. Clients",
		"## What limited the results",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("benchmarks.md lacks %q", want)
		}
	}
	for _, f := range []string{"throughput.png", "handoff.png", "idle-memory.png", "idle-cpu.png", "dead-holder.png", "clients.png", "results.json"} {
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
