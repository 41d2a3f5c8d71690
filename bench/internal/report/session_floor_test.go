package report

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/monolock/monolock/bench/internal/stats"
	"github.com/monolock/monolock/bench/internal/systems"
)

// withSessionFloor adds the session floor and both session clients to
// withFloor: at 1 worker both meet 0.9× the session floor, at 16 the bare
// client misses (0.875×) and the Go client meets it exactly (0.9×).
func withSessionFloor() *Results {
	r := withFloor()
	cell := func(sys string, w int, perSec float64) ThroughputCell {
		return ThroughputCell{System: sys, Workers: w, Stats: stats.Summary{Count: 100, PerSec: perSec, P50: time.Millisecond, P99: 2 * time.Millisecond}}
	}
	r.Throughput = append(r.Throughput,
		cell(systems.SessionFloor, 1, 2000), cell(systems.MonolockSessionBare, 1, 1900), cell(systems.MonolockSession, 1, 1800),
		cell(systems.SessionFloor, 16, 4000), cell(systems.MonolockSessionBare, 16, 3500), cell(systems.MonolockSession, 16, 3600),
		ThroughputCell{System: systems.MonolockSessionBare, Workers: 64, Err: "refused"})
	return r
}

func TestSessionFloorColumnAndTargets(t *testing.T) {
	text := string(markdown(withSessionFloor(), nil, ""))
	rows := table(t, text, "| system | workers | cycles/s | × floor | × session floor |")
	for _, want := range []string{
		"| tcp floor | 1 | 1000 | 1.00× | 0.50× |",
		"| session floor | 1 | 2000 | 2.00× | 1.00× |",
		"| monolock serve, bare client, a session per worker | 16 | 3500 | 1.75× | 0.88× |",
		"| monolock serve, Go client, a session per worker | 16 | 3600 | 1.80× | 0.90× |",
		"| monolock serve, bare client, a session per worker | 64 | failed: refused |",
	} {
		if !slices.ContainsFunc(rows, func(row string) bool { return strings.HasPrefix(row, want) }) {
			t.Errorf("section 1 lacks a row starting %q", want)
		}
	}
	for _, row := range rows[1:] {
		if strings.Count(row, "|") != strings.Count(rows[0], "|") {
			t.Errorf("row %q does not match header %q", row, rows[0])
		}
	}
	for _, want := range []string{
		"| monolock session with the bare client ≥ 0.9× the session floor (uncontended cycles/s, every worker count) | 1 worker: 1900 of the session floor's 2000 (0.950×); 16 workers: 3500 of the session floor's 4000 (0.875×) | **missed** at 16 workers |",
		"| monolock session with the Go client ≥ 0.9× the session floor (uncontended cycles/s, every worker count) | 1 worker: 1800 of the session floor's 2000 (0.900×); 16 workers: 3600 of the session floor's 4000 (0.900×) | met |",
		// The tcp floor's targets still read against the tcp floor.
		"| monolock serve with the bare client ≥ 0.95× the tcp floor (uncontended cycles/s, every worker count) | 1 worker: 960 of the floor's 1000 (0.960×); 16 workers: 1900 of the floor's 2000 (0.950×) | met |",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("targets lack %q", want)
		}
	}
	if !strings.Contains(text, "*session floor* is the same for a claim on a session") {
		t.Error("section 1 does not say what the session floor is")
	}
}

// A run without the session floor has neither its column, nor its text,
// nor its targets.
func TestNoSessionFloorNoColumn(t *testing.T) {
	text := string(markdown(withFloor(), nil, ""))
	rows := table(t, text, "| system | workers | cycles/s |")
	if strings.Contains(rows[0], "session floor") || strings.Contains(text, "the session floor (uncontended") || strings.Contains(text, "*session floor*") {
		t.Errorf("a run without the session floor shows its figures: %s", rows[0])
	}
}

// The throughput chart labels the session rows, in the order the run
// measured its systems.
func TestSessionFloorChart(t *testing.T) {
	d := newTestDrawer()
	if err := Write(t.TempDir(), withSessionFloor(), "", d); err != nil {
		t.Fatal(err)
	}
	want := []string{"tcp floor", "monolock, bare", "monolock, Go", "redis", "etcd", "session floor", "session, bare", "session, Go", "postgres"}
	if got := d.bars["throughput.png"].Categories; !slices.Equal(got, want) {
		t.Errorf("throughput categories %q, want %q", got, want)
	}
}
