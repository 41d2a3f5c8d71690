package report

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/monolock/monolock/bench/internal/stats"
	"github.com/monolock/monolock/bench/internal/systems"
	"github.com/monolock/monolock/bench/internal/workload"
)

// withTLS adds the TLS systems to withSessionFloor (monolock 1000 cycles/s
// and monolock-session 1800 and 3600 at 1 and 16 workers): at 1 worker the
// TLS session meets 0.8× the plain one (1500, 0.833×), at 16 it misses
// (2800, 0.777×); the single claim over TLS is measured at 1 worker only.
func withTLS() *Results {
	r := withSessionFloor()
	cell := func(sys string, w int, perSec float64) ThroughputCell {
		return ThroughputCell{System: sys, Workers: w, Stats: stats.Summary{Count: 100, PerSec: perSec, P50: time.Millisecond, P99: 2 * time.Millisecond}}
	}
	r.Throughput = append(r.Throughput,
		cell(systems.MonolockTLS, 1, 600), cell(systems.MonolockTLSNoResume, 1, 200),
		cell(systems.MonolockSessionTLS, 1, 1500), cell(systems.MonolockSessionTLS, 16, 2800))
	return r
}

func TestTLSTableAndTarget(t *testing.T) {
	text := string(markdown(withTLS(), nil, ""))
	rows := table(t, text, "| workers | plain claim | TLS, resumed | TLS, full handshake |")
	for _, want := range []string{
		"| 1 | 1000 | 600 | 200 | 3.00× | 0.60× | 1800 | 1500 | 0.83× |",
		"| 16 | 1000 | – | – | – | – | 3600 | 2800 | 0.78× |",
	} {
		if !slices.Contains(rows, want) {
			t.Errorf("TLS table lacks %q; has %q", want, rows)
		}
	}
	for _, row := range rows[1:] {
		if strings.Count(row, "|") != strings.Count(rows[0], "|") {
			t.Errorf("row %q does not match header %q", row, rows[0])
		}
	}
	want := "| with a session over TLS ≥ 0.8× a plain session (uncontended cycles/s, every worker count) | 1 worker: 1500 of the plain session's 1800 (0.833×); 16 workers: 2800 of the plain session's 3600 (0.777×) | **missed** at 16 workers |"
	if !strings.Contains(text, want) {
		t.Errorf("targets lack %q", want)
	}
	// The TLS rows are in section 1 under their own labels.
	for _, label := range []string{"| monolock serve over TLS, Go client, resumption on | 1 | 600 |", "| monolock serve over TLS, Go client, resumption off | 1 | 200 |", "| monolock serve over TLS, Go client, a session per worker | 16 | 2800 |"} {
		if !strings.Contains(text, label) {
			t.Errorf("section 1 lacks a row starting %q", label)
		}
	}
}

// A run without TLS systems has neither the TLS table nor its target.
func TestNoTLSWithoutTLSSystems(t *testing.T) {
	text := string(markdown(withSessionFloor(), nil, ""))
	if strings.Contains(text, "### Over TLS") || strings.Contains(text, "session over TLS") {
		t.Error("a run without TLS systems reports TLS")
	}
}

// The session's handoff is held to PostgreSQL's at p50 and at p99, each
// verdict on its own line beside monolock's.
func TestSessionHandoffVsPostgres(t *testing.T) {
	r := sample() // postgres: p50 2 ms, p99 500 µs; monolock: p50 1 ms, p99 1 ms
	r.Handoff = append(r.Handoff, HandoffCell{System: systems.MonolockSession, Workers: 16, Result: workload.HandoffResult{
		Latency: stats.Summary{Count: 10, PerSec: 10, P50: 300 * time.Microsecond, P99: 400 * time.Microsecond}}})
	text := string(markdown(r, nil, ""))
	for _, want := range []string{
		"| handoff p50 and p99 ≤ postgres's | p50: monolock 1.00 ms, postgres 2.00 ms (0.50×); p99: monolock 1.00 ms, postgres 500 µs (2.00×) | **missed** at p99 |",
		"| with a session per worker, handoff p50 and p99 ≤ postgres's | p50: monolock-session 300 µs, postgres 2.00 ms (0.15×); p99: monolock-session 400 µs, postgres 500 µs (0.80×) | met |",
		"| monolock-session | 10.0 | 0.00 | 300 µs | 400 µs | 0.40× |",
		"*monolock-session* is the Go client with a session",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	r.Handoff[len(r.Handoff)-1].Result.Latency.P50 = 3 * time.Millisecond
	if text := string(markdown(r, nil, "")); !strings.Contains(text, "(1.50×); p99: monolock-session 400 µs, postgres 500 µs (0.80×) | **missed** at p50 |") {
		t.Error("a session handoff p50 over postgres's is not missed")
	}
}
