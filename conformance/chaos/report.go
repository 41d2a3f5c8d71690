package chaos

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Report is what a run saw.
type Report struct {
	Cell     string
	Lease    time.Duration
	Duration time.Duration
	Seed     uint64
	Workers  []WorkerStats
	Grants   int
	Faults   []FaultRecord

	Overlaps       []Overlap // no pause explains them: violations
	PausedOverlaps []Overlap // a holder's process was stopped: reported, allowed

	WritesAccepted int
	StaleRejected  int // by a holder that had been paused: what fencing is for
	StaleAccepted  int // below a token already granted: a violation
	HolderFenced   int // a never-paused holder's write rejected: a violation
	OutOfOrder     int // grants whose token was not above every earlier one

	LongestGap    time.Duration // the longest time nobody held the lock
	Bound         time.Duration // for the cell to grant again after a fault cleared
	Stalls        []Gap         // times without a holder beyond the bound and the faults: violations
	Recoveries    []Recovery
	EtcdElections []time.Duration
	WorkerErrors  []string
}

// WorkerStats counts one worker's grants and failed acquires.
type WorkerStats struct {
	Name     string
	Grants   int
	Failures map[string]int
}

// Recovery is the time from a server-side fault to the next grant.
type Recovery struct {
	Outage
	After   time.Duration // -1: no grant came before the run ended
	Stalled bool          // no grant within the bound after the fault cleared: a violation
}

func (r *run) report(end time.Duration, s *scheduler) *Report {
	l := r.ledger
	overlaps, paused, gaps := l.verdict(end)
	rep := &Report{
		Cell: r.cfg.Cell.Describe(), Lease: r.cfg.Lease, Duration: end, Seed: r.cfg.Seed,
		Faults: s.records, Overlaps: overlaps, PausedOverlaps: paused, EtcdElections: s.etcd,
		Bound: 2*r.cfg.EtcdTTL + 6*r.cfg.Lease + 5*time.Second,
	}
	l.mu.Lock()
	rep.Grants = len(l.windows)
	rep.WritesAccepted, rep.StaleRejected, rep.StaleAccepted = l.accepted, l.staleRejected, l.staleAccepted
	rep.HolderFenced, rep.OutOfOrder = l.holderFenced, l.outOfOrder
	starts := make([]time.Duration, 0, len(l.windows))
	for _, w := range l.windows {
		starts = append(starts, w.Start)
	}
	l.mu.Unlock()
	slices.Sort(starts)
	for _, o := range s.outages {
		if o.Cleared == 0 {
			o.Cleared = end // the run ended first
		}
		rc := Recovery{Outage: o, After: -1, Stalled: end-o.Cleared > rep.Bound}
		if i, _ := slices.BinarySearch(starts, o.At); i < len(starts) {
			rc.After = starts[i] - o.At
		}
		if i, _ := slices.BinarySearch(starts, o.Cleared); i < len(starts) {
			rc.Stalled = starts[i]-o.Cleared > rep.Bound
		}
		rep.Recoveries = append(rep.Recoveries, rc)
	}
	rep.Stalls = stalls(gaps, rep.Recoveries, rep.Bound)
	for _, g := range gaps {
		rep.LongestGap = max(rep.LongestGap, g.To-g.From)
	}
	if len(starts) == 0 {
		rep.LongestGap = end
	}
	for _, w := range r.workers {
		w.mu.Lock()
		rep.Workers = append(rep.Workers, WorkerStats{Name: w.name, Grants: w.grants, Failures: w.failures})
		w.mu.Unlock()
	}
	return rep
}

// stalls are the gaps that outlast the bound by more than the time faults
// kept the servers down (a quorum loss, a cut) during them.
func stalls(gaps []Gap, outages []Recovery, bound time.Duration) []Gap {
	var out []Gap
	for _, g := range gaps {
		down := time.Duration(0)
		for _, o := range outages {
			down += max(0, min(g.To, o.Cleared)-max(g.From, o.At))
		}
		if g.To-g.From-down > bound {
			out = append(out, g)
		}
	}
	return out
}

// Violations lists every broken promise; empty means the run passed.
func (r *Report) Violations() []string {
	var v []string
	for _, o := range r.Overlaps {
		v = append(v, fmt.Sprintf("two holders at once for %v: %s token %d [%.3fs, %.3fs] and %s token %d [%.3fs, %.3fs]",
			o.For.Round(time.Millisecond), o.A.Worker, o.A.Token, o.A.Start.Seconds(), o.A.End.Seconds(),
			o.B.Worker, o.B.Token, o.B.Start.Seconds(), o.B.End.Seconds()))
	}
	if r.StaleAccepted > 0 {
		v = append(v, fmt.Sprintf("%d stale writes accepted", r.StaleAccepted))
	}
	if r.HolderFenced > 0 {
		v = append(v, fmt.Sprintf("%d writes of a holder that was never paused were rejected", r.HolderFenced))
	}
	if r.OutOfOrder > 0 {
		v = append(v, fmt.Sprintf("%d grants with a token not above every earlier one", r.OutOfOrder))
	}
	if r.Grants == 0 {
		v = append(v, "no grant at all")
	}
	for _, g := range r.Stalls {
		v = append(v, fmt.Sprintf("nobody held the lock from %.2f s to %.2f s (bound %v beyond the faults)", g.From.Seconds(), g.To.Seconds(), r.Bound))
	}
	for _, rc := range r.Recoveries {
		if rc.Stalled {
			v = append(v, fmt.Sprintf("no grant within %v after the %s at %.2f s cleared", r.Bound, rc.Kind, rc.At.Seconds()))
		}
	}
	v = append(v, r.WorkerErrors...)
	return v
}

// Write prints the report for humans.
func (r *Report) Write(w io.Writer) {
	fmt.Fprintf(w, "\nchaos: %s, lease %v, %.0f s, seed %d\n", r.Cell, r.Lease, r.Duration.Seconds(), r.Seed)
	kinds := map[string]int{}
	for _, f := range r.Faults {
		kinds[f.Kind]++
	}
	var fs []string
	for k, n := range kinds {
		fs = append(fs, fmt.Sprintf("%s %d", k, n))
	}
	slices.Sort(fs)
	fmt.Fprintf(w, "  faults          %d (%s)\n", len(r.Faults), strings.Join(fs, ", "))
	fmt.Fprintf(w, "  grants          %d\n", r.Grants)
	for _, ws := range r.Workers {
		fmt.Fprintf(w, "    %-18s %3d grants%s\n", ws.Name, ws.Grants, failures(ws.Failures))
	}
	fmt.Fprintf(w, "  overlapping validity windows   %d without a pause (0 required), %d with a holder paused\n",
		len(r.Overlaps), len(r.PausedOverlaps))
	fmt.Fprintf(w, "  fenced writes   %d accepted, %d stale rejected, %d stale accepted (0 required), %d from a live holder rejected (0 required)\n",
		r.WritesAccepted, r.StaleRejected, r.StaleAccepted, r.HolderFenced)
	order := "strictly increasing"
	if r.OutOfOrder > 0 {
		order = fmt.Sprintf("%d grants out of order", r.OutOfOrder)
	}
	fmt.Fprintf(w, "  tokens          %s across %d grants\n", order, r.Grants)
	fmt.Fprintf(w, "  longest without a holder   %.2f s (bound: %.0f s beyond the time faults kept the servers down)\n", r.LongestGap.Seconds(), r.Bound.Seconds())
	for _, rc := range r.Recoveries {
		after := "no grant before the end"
		if rc.After >= 0 {
			after = fmt.Sprintf("first grant %.2f s later", rc.After.Seconds())
		}
		fmt.Fprintf(w, "  %-11s at %6.2f s: %s\n", rc.Kind, rc.At.Seconds(), after)
	}
	for _, d := range r.EtcdElections {
		fmt.Fprintf(w, "  etcd raft leader lost: new leader after %.2f s\n", d.Seconds())
	}
	if v := r.Violations(); len(v) > 0 {
		fmt.Fprintf(w, "  VIOLATIONS (%d):\n", len(v))
		for _, s := range v {
			fmt.Fprintf(w, "    %s\n", s)
		}
	} else {
		fmt.Fprintln(w, "  violations      0")
	}
}

func failures(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	var parts []string
	for k, n := range m {
		parts = append(parts, fmt.Sprintf("%s %d", k, n))
	}
	slices.Sort(parts)
	return ", failed acquires: " + strings.Join(parts, ", ")
}
