package report

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/monolock/monolock/bench/internal/election"
	"github.com/monolock/monolock/bench/internal/systems"
)

// writeElection prints workload 10: leader election beside etcd's
// concurrency.Election.
func writeElection(b *bytes.Buffer, r *Results) {
	e := r.Election
	if e == nil {
		return
	}
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## 10. Leader election\n\n")
	p("One name, one leader A, candidate B queued behind it, and %d followers, on one `monolock serve` and on the etcd peer, all on loopback. ", e.Followers)
	p("monolock: the Go client's `Client.Campaign` (a term: `Term.Resign`, `Term.Proclaim`, `Term.Done()`) and `Client.Observe` (a follower counts a leader only in the state *leading*, not *held back* or *unknown*). ")
	p("etcd: `concurrency.Election` (`Campaign`, `Resign`, `Proclaim`, `Observe`) on a `concurrency.Session` whose `Done()` is the leader's loss signal. ")
	p("Every participant is a client of its own (for etcd also a session of its own), as separate processes would be; lease and session TTL %s. ", round(e.Lease))
	p("%d runs per system of each scenario below but the watch, the systems taking turns run by run (the fault scenarios batch by batch, %d runs of one system at once, each faulted at a random point of its leader's refresh cycle).\n\n", e.Runs, e.Parallel)
	writeSeparateRun(b, e.SeparateRun)
	if e.Err != "" {
		p("Not measured: %s\n\n", oneLine(e.Err))
		return
	}
	if len(e.Systems) == 0 {
		p("Not measured: neither monolock nor etcd was among the systems of the run.\n\n")
		return
	}
	writeHandovers(b, e)
	writeDelivery(b, e)
	writeSplitBrain(b, e)
}

// electionMonolock is monolock's results, the base of every ratio.
func electionMonolock(e *ElectionSection) (election.System, bool) {
	for _, s := range e.Systems {
		if s.System == systems.Monolock {
			return s, true
		}
	}
	return election.System{}, false
}

// writeHandovers prints scenarios 1 and 2.
func writeHandovers(b *bytes.Buffer, e *ElectionSection) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("### Handover to the next candidate\n\n")
	p("*A resigns*: from the start of A's resign call to B's `Campaign` returning (*elected*), and to the last of the %d followers reporting B (*all know*). ", e.Followers)
	p("*A's link dies*: A's client runs behind the fault proxy, which resets its connections and then carries nothing (A's process lives on and its client may dial again; the link stays dead): the same two figures from the reset, with the lease or TTL of %s to wait out.\n\n", round(e.Lease))
	p("| scenario | system | runs | elected: median | p99 | max | all know: median | p99 | max | system ÷ monolock (medians: elected / all know) | failed |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	mono, _ := electionMonolock(e)
	for _, sc := range []struct {
		label string
		runs  func(election.System) []election.Handover
	}{
		{"A resigns", func(s election.System) []election.Handover { return s.Resign }},
		{"A's link reset, then dead", func(s election.System) []election.Handover { return s.Crash }},
	} {
		base := election.SummariseHandovers(sc.runs(mono))
		for _, s := range e.Systems {
			h := election.SummariseHandovers(sc.runs(s))
			rt := ratio(float64(h.Elected.Median), float64(base.Elected.Median)) + " / " + ratio(float64(h.AllKnow.Median), float64(base.AllKnow.Median))
			if s.System == systems.Monolock {
				rt = ""
			}
			failed := fmt.Sprint(h.Failed)
			if h.FirstErr != "" {
				failed += ": " + oneLine(h.FirstErr)
			}
			p("| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", sc.label, s.System, h.Runs,
				dur(h.Elected.Median), dur(h.Elected.P99), dur(h.Elected.Max), dur(h.AllKnow.Median), dur(h.AllKnow.P99), dur(h.AllKnow.Max), rt, failed)
		}
	}
	p("\n")
}

// writeDelivery prints scenario 3.
func writeDelivery(b *bytes.Buffer, e *ElectionSection) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("### Watch delivery\n\n")
	p("The leader proclaims %d new values per system (monolock `Term.Proclaim`, etcd `Election.Proclaim`), one every %s or as soon as the previous call returns, spread over a few runs; each sample is one follower's delay to report one value, from the start of its Proclaim call. ", e.Proclaims, dur(e.Pace))
	p("*Proclaim call* is the call itself, until the server acknowledged it.\n\n")
	p("| system | samples | p50 | p99 | max | system ÷ monolock (p50 / p99) | Proclaim call: p50 | p99 | missed | error |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	mono, _ := electionMonolock(e)
	for _, s := range e.Systems {
		w, base := s.Watch, mono.Watch
		rt := ratio(float64(w.Latency.P50), float64(base.Latency.P50)) + " / " + ratio(float64(w.Latency.P99), float64(base.Latency.P99))
		if s.System == systems.Monolock {
			rt = ""
		}
		p("| %s | %d | %s | %s | %s | %s | %s | %s | %d | %s |\n", s.System, w.Latency.Count, dur(w.Latency.P50), dur(w.Latency.P99), dur(w.Latency.Max), rt,
			dur(w.Call.P50), dur(w.Call.P99), w.Missed, oneLine(w.Err))
	}
	p("\n")
}

// writeSplitBrain prints scenario 4.
func writeSplitBrain(b *bytes.Buffer, e *ElectionSection) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("### Two leaders at once under a blackhole\n\n")
	p("A's client runs behind the fault proxy, B queued on a direct link; the proxy then drops every byte of A's link both ways and keeps its sockets open. ")
	p("From that fault: when A's loss signal fires (monolock `Term.Done()`, etcd `Session.Done()`) and when B's `Campaign` returns. ")
	p("The *window* is A's loss − B's election: positive while both believed they led (*overlap*), negative when A was told first. A never told counts as an overlap.\n\n")
	p("| system | runs | A told: median | B elected: median | window: min | median | max | runs with overlap | A never told | B never elected | failed |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, s := range e.Systems {
		x := election.SummariseSplits(s.Split)
		window := "– | – | –"
		if x.Measured > 0 {
			window = signedMS(x.Min) + " | " + signedMS(x.Median) + " | " + signedMS(x.Max)
		}
		failed := fmt.Sprint(x.Failed)
		if x.FirstErr != "" {
			failed += ": " + oneLine(x.FirstErr)
		}
		p("| %s | %d | %s | %s | %s | %d | %d | %d | %s |\n", s.System, x.Runs, dur(x.Lost.Median), dur(x.Elected.Median), window,
			x.Overlapping, x.NotTold, x.NotElected, failed)
	}
	p("\nEvery run's window, in run order:\n\n")
	for _, s := range e.Systems {
		p("- %s: %s\n", s.System, splitWindows(s.Split))
	}
	p("\n")
}

// splitWindows lists each run's window, or what kept it from being one.
func splitWindows(runs []election.Split) string {
	var out []string
	for _, r := range runs {
		w, ok := r.Window()
		switch {
		case ok:
			out = append(out, signedMS(w))
		case r.Err != "":
			out = append(out, "failed")
		case !r.HasLost && r.HasElected:
			out = append(out, "A never told")
		default:
			out = append(out, "B never elected")
		}
	}
	if len(out) == 0 {
		return "no runs"
	}
	return strings.Join(out, ", ")
}
