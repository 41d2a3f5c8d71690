package election

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/monolock/monolock/bench/internal/monoserver"
)

// Every scenario against a real `monolock serve`, briefly and on a short
// lease: each run measures, the followers all see the new leader and
// every proclaimed value, and the leader cut off is told before its
// successor is elected.
func TestScenariosOnMonolockServe(t *testing.T) {
	dir := t.TempDir()
	bin, err := monoserver.Build(filepath.Join("..", "..", "..", "go"), dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	srv, err := monoserver.Start(ctx, bin, filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	const lease = time.Second
	o := Options{Lease: lease, Runs: 2, Parallel: 2, Followers: 3, Proclaims: 20, Rounds: 2, Pace: 2 * time.Millisecond, Log: t.Logf}
	got := Measure(ctx, []Recipe{Monolock(srv.Addr, lease)}, o)
	if len(got) != 1 {
		t.Fatalf("%d systems", len(got))
	}
	m := got[0]
	for what, runs := range map[string][]Handover{"resign": m.Resign, "crash": m.Crash} {
		s := SummariseHandovers(runs)
		if s.Runs != 2 || s.Failed != 0 {
			t.Fatalf("%s: %+v", what, s)
		}
	}
	if r := SummariseHandovers(m.Resign); r.AllKnow.Max > lease/2 {
		t.Errorf("a resign hands over at once, not after %v", r.AllKnow.Max)
	}
	// A reset leader keeps the name until its lease ends: at least 3/4 of
	// it after the fault (its last heartbeat went out up to lease/4 before).
	if c := SummariseHandovers(m.Crash); c.Elected.N != 2 || c.Elected.Median < lease*3/4-50*time.Millisecond {
		t.Errorf("crash: %+v", c)
	}
	if w := m.Watch; w.Proclaims != 20 || w.Latency.Count+w.Missed != 20*3 || w.Missed != 0 || w.Err != "" {
		t.Errorf("watch: %+v", w)
	}
	s := SummariseSplits(m.Split)
	if s.Measured != 2 || s.Overlapping != 0 || s.Max >= 0 {
		t.Errorf("split: %+v (runs %+v)", s, m.Split)
	}
}

func TestSplitWindowAndOverlap(t *testing.T) {
	ms := time.Millisecond
	runs := []Split{
		{HasLost: true, Lost: 1600 * ms, HasElected: true, Elected: 2000 * ms}, // told first
		{HasLost: true, Lost: 2300 * ms, HasElected: true, Elected: 2000 * ms}, // both led for 300 ms
		{HasElected: true, Elected: 2100 * ms},                                 // never told
		{HasLost: true, Lost: 1700 * ms},                                       // nobody elected
		{Err: "setup"},
	}
	s := SummariseSplits(runs)
	if s.Runs != 5 || s.Measured != 2 || s.Overlapping != 2 || s.NotTold != 1 || s.NotElected != 1 || s.Failed != 1 || s.FirstErr != "setup" {
		t.Fatalf("%+v", s)
	}
	if s.Min != -400*ms || s.Max != 300*ms {
		t.Errorf("windows: min %v max %v", s.Min, s.Max)
	}
}

func TestSpreadOf(t *testing.T) {
	var xs []time.Duration
	for i := 100; i >= 1; i-- {
		xs = append(xs, time.Duration(i)*time.Millisecond)
	}
	s := SpreadOf(xs)
	if s.N != 100 || s.Median != 50*time.Millisecond || s.P99 != 99*time.Millisecond || s.Max != 100*time.Millisecond {
		t.Errorf("%+v", s)
	}
	if (SpreadOf(nil) != Spread{}) {
		t.Error("no figures, no spread")
	}
}
