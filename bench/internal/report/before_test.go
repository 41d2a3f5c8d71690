package report

import (
	"strings"
	"testing"
	"time"

	"github.com/monolock/monolock/bench/internal/stats"
	"github.com/monolock/monolock/bench/internal/systems"
)

// withBefore adds monolock-before to sample (monolock 1000 cycles/s at 1
// and 16 workers): at 1 worker monolock meets 0.95× it (1040, 0.961×), at
// 16 it misses (1100, 0.909×).
func withBefore() *Results {
	r := sample()
	cell := func(w int, perSec float64) ThroughputCell {
		return ThroughputCell{System: systems.MonolockBefore, Workers: w, Stats: stats.Summary{Count: 100, PerSec: perSec, P50: time.Millisecond, P99: 2 * time.Millisecond}}
	}
	r.Throughput = append(r.Throughput, cell(1, 1040), cell(16, 1100))
	r.Versions = map[string]string{systems.MonolockBefore: "monolock serve, built from go/ at 287c3cf"}
	return r
}

const beforeLabel = "| single claims no slower than before: monolock ≥ 0.95× monolock-before (uncontended cycles/s, every worker count; 0.95 allows for this shared machine's run-to-run noise) |"

func TestBeforeTarget(t *testing.T) {
	text := string(markdown(withBefore(), nil, ""))
	want := beforeLabel + " 1 worker: 1000 of the monolock-before's 1040 (0.961×); 16 workers: 1000 of the monolock-before's 1100 (0.909×) | **missed** at 16 workers |"
	if !strings.Contains(text, want) {
		t.Errorf("targets lack %q", want)
	}
	// Its rows are in section 1 beside monolock's, with the ratio of the two.
	for _, row := range []string{
		"| monolock serve, earlier revision, Go client | 1 | 1040 | 1.00 ms | 2.00 ms | 0.96× |",
		"| monolock serve, earlier revision, Go client | 16 | 1100 | 1.00 ms | 2.00 ms | 0.91× |",
		"the benchmark's `-before` flag names (in this run: monolock serve, built from go/ at 287c3cf): the monolock ÷ system column",
	} {
		if !strings.Contains(text, row) {
			t.Errorf("section 1 lacks %q", row)
		}
	}

	// Exactly 0.95× is met; a worker count monolock missed is missed.
	r := withBefore()
	for i, c := range r.Throughput {
		if c.System == systems.MonolockBefore && c.Workers == 16 {
			r.Throughput[i].Stats.PerSec = 1000 / 0.95
		}
	}
	if text := string(markdown(r, nil, "")); !strings.Contains(text, "16 workers: 1000 of the monolock-before's 1053 (0.950×) | met |") {
		t.Errorf("monolock at 0.95× monolock-before is not met:\n%s", targetRow(text))
	}
	r = withBefore()
	r.Throughput = append(r.Throughput[:0:0], r.Throughput...)
	for i, c := range r.Throughput {
		if c.System == systems.Monolock && c.Workers == 1 {
			r.Throughput[i] = ThroughputCell{System: systems.Monolock, Workers: 1, Err: "refused"}
		}
	}
	if text := string(markdown(r, nil, "")); !strings.Contains(text, "1 worker: not measured; 16 workers: 1000 of the monolock-before's 1100 (0.909×) | **missed** at 1 worker, 16 workers |") {
		t.Errorf("an unmeasured monolock cell is not missed:\n%s", targetRow(text))
	}
}

// A run without monolock-before has neither its target nor its text.
func TestNoBeforeTargetWithoutBefore(t *testing.T) {
	text := string(markdown(sample(), nil, ""))
	if strings.Contains(text, "monolock-before") || strings.Contains(text, "earlier revision") {
		t.Error("a run without monolock-before reports it")
	}
}

// targetRow is the before target's row of text, for failure messages.
func targetRow(text string) string {
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, beforeLabel) {
			return line
		}
	}
	return "(no before target)"
}
