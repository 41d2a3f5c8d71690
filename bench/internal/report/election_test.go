package report

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/monolock/monolock/bench/internal/election"
	"github.com/monolock/monolock/bench/internal/stats"
)

// electionSample is monolock and etcd, three runs each, etcd's handovers
// ten times slower, one etcd split run overlapping.
func electionSample() *ElectionSection {
	ms := time.Millisecond
	handovers := func(unit time.Duration) []election.Handover {
		return []election.Handover{{Elected: 1 * unit, AllKnow: 2 * unit, Knowing: 8}, {Elected: 2 * unit, AllKnow: 3 * unit, Knowing: 8}, {Elected: 3 * unit, AllKnow: 4 * unit, Knowing: 8}}
	}
	return &ElectionSection{Lease: 2 * time.Second, Runs: 3, Parallel: 3, Followers: 8, Proclaims: 200, Pace: 10 * ms,
		Systems: []election.System{
			{System: "monolock", Resign: handovers(ms), Crash: handovers(time.Second),
				Watch: election.Delivery{Proclaims: 200, Followers: 8, Latency: stats.Summary{Count: 1600, P50: ms, P99: 2 * ms, Max: 3 * ms}},
				Split: []election.Split{
					{HasLost: true, Lost: 1600 * ms, HasElected: true, Elected: 2000 * ms},
					{HasLost: true, Lost: 1500 * ms, HasElected: true, Elected: 1900 * ms},
					{Err: "setup"}}},
			{System: "etcd", Resign: handovers(10 * ms), Crash: handovers(2 * time.Second),
				Watch: election.Delivery{Proclaims: 200, Followers: 8, Latency: stats.Summary{Count: 1600, P50: 5 * ms, P99: 20 * ms, Max: 30 * ms}},
				Split: []election.Split{
					{HasLost: true, Lost: 2300 * ms, HasElected: true, Elected: 2000 * ms},
					{HasElected: true, Elected: 2100 * ms},
					{HasLost: true, Lost: 1900 * ms, HasElected: true, Elected: 2000 * ms}}},
		}}
}

func TestElectionSectionTablesAndRatios(t *testing.T) {
	r := &Results{Election: electionSample()}
	var b bytes.Buffer
	writeElection(&b, r)
	out := b.String()
	for _, want := range []string{
		"## 10. Leader election",
		"| A resigns | monolock | 3 | 2.00 ms | 3.00 ms | 3.00 ms | 3.00 ms | 4.00 ms | 4.00 ms |  | 0 |",
		"| A resigns | etcd | 3 | 20.0 ms | 30.0 ms | 30.0 ms | 30.0 ms | 40.0 ms | 40.0 ms | 10.0× / 10.0× | 0 |",
		"| A's link reset, then dead | etcd | 3 | 4.00 s | 6.00 s | 6.00 s | 6.00 s | 8.00 s | 8.00 s | 2.00× / 2.00× | 0 |",
		"| etcd | 1600 | 5.00 ms | 20.0 ms | 30.0 ms | 5.00× / 10.0× |",
		"| monolock | 3 | 1.50 s | 1.90 s | −400 ms | −400 ms | −400 ms | 0 | 0 | 0 | 1: setup |",
		// Medians of two are the lower (nearest rank).
		"| etcd | 3 | 1.90 s | 2.00 s | −100 ms | −100 ms | +300 ms | 2 | 1 | 0 | 0 |",
		"- monolock: −400 ms, −400 ms, failed",
		"- etcd: +300 ms, A never told, −100 ms",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	r.Election.Separate = true
	b.Reset()
	writeElection(&b, r)
	if !strings.Contains(b.String(), "measured by a run of its own") {
		t.Error("a separate run is said so")
	}
	r.Election = &ElectionSection{Err: "monolock serve did not start"}
	b.Reset()
	writeElection(&b, r)
	if !strings.Contains(b.String(), "Not measured: monolock serve did not start") {
		t.Errorf("an error is reported: %s", b.String())
	}
}
