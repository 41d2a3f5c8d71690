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
	Locks    []LockStats
	Workers  []WorkerStats
	Grants   int
	Faults   []FaultRecord

	Breaches       []Breach // more holders than a lock allows, no pause explains them: violations
	PausedBreaches []Breach // a paused holder made them: reported, allowed

	WritesAccepted int
	StaleRejected  int // by a holder that had been paused: what fencing is for
	StaleAccepted  int // below a token granted to a conflicting claim: a violation
	HolderFenced   int // a never-paused holder's write rejected: a violation
	OutOfOrder     int // grants whose token was not above every earlier conflicting grant's

	Bound         time.Duration // for the cell to grant again after a fault cleared
	Stalls        []Gap         // times a lock had no holder beyond the bound and the faults: violations
	Recoveries    []Recovery
	EtcdElections []time.Duration
	Elections     []ElectionStats // the watchers of each election lock
	WorkerErrors  []string
}

// LockStats is what one lock saw.
type LockStats struct {
	Lock         Lock
	Grants       int
	SharedGrants int
	MostAtOnce   int           // the most holders never paused at one instant (a semaphore's limit reached shows here)
	MostPaused   int           // the most holders at one instant, paused ones included
	LongestGap   time.Duration // the longest time nobody held it
}

// WorkerStats counts one worker's grants and failed acquires.
type WorkerStats struct {
	Name         string
	Lock         string
	Grants       int
	SharedGrants int
	Failures     map[string]int
}

// Recovery is the time from a server-side fault to the next grant.
type Recovery struct {
	Outage
	After   time.Duration // -1: no grant came before the run ended
	Stalled bool          // no grant within the bound after the fault cleared: a violation
}

func (r *run) report(end time.Duration, s *scheduler) *Report {
	l := r.ledger
	rep := &Report{
		Cell: r.cfg.Cell.Describe(), Lease: r.cfg.Lease, Duration: end, Seed: r.cfg.Seed,
		Faults: s.records, EtcdElections: s.etcd,
		Bound: 2*r.cfg.EtcdTTL + 6*r.cfg.Lease + 5*time.Second,
	}
	var starts []time.Duration
	var gaps []Gap
	for _, lock := range r.cfg.Locks {
		ws := l.closed(lock.Name, end)
		h := analyse(lock, ws, end)
		st := LockStats{Lock: lock, Grants: len(ws), MostAtOnce: h.most, MostPaused: h.withPaused}
		if len(ws) == 0 {
			st.LongestGap = end
		}
		for _, w := range ws {
			starts = append(starts, w.Start)
			if w.Shared {
				st.SharedGrants++
			}
		}
		for _, g := range h.gaps {
			st.LongestGap = max(st.LongestGap, g.To-g.From)
		}
		for _, b := range h.breaches {
			if b.Paused {
				rep.PausedBreaches = append(rep.PausedBreaches, b)
			} else {
				rep.Breaches = append(rep.Breaches, b)
			}
		}
		rep.Locks = append(rep.Locks, st)
		rep.Grants += st.Grants
		gaps = append(gaps, h.gaps...)
		if lock.Election {
			rep.Elections = append(rep.Elections, analyseElection(lock, ws, r.workersOn(lock.Name), s.records, r.cfg.Lease, end))
		}
	}
	l.mu.Lock()
	rep.WritesAccepted, rep.StaleRejected, rep.StaleAccepted = l.accepted, l.staleRejected, l.staleAccepted
	rep.HolderFenced, rep.OutOfOrder = l.holderFenced, l.outOfOrder
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
	for _, w := range r.workers {
		w.mu.Lock()
		rep.Workers = append(rep.Workers, WorkerStats{Name: w.name, Lock: w.lock.Name, Grants: w.grants,
			SharedGrants: w.sharedGrants, Failures: w.failures})
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
	for _, b := range r.Breaches {
		v = append(v, b.String())
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
	for _, l := range r.Locks {
		if l.Grants == 0 {
			v = append(v, "no grant of "+l.Lock.Name+" at all")
		}
	}
	if len(r.Locks) == 0 {
		v = append(v, "no lock contended for")
	}
	for _, g := range r.Stalls {
		v = append(v, fmt.Sprintf("nobody held %s from %.2f s to %.2f s (bound %v beyond the faults)", g.Lock, g.From.Seconds(), g.To.Seconds(), r.Bound))
	}
	for _, rc := range r.Recoveries {
		if rc.Stalled {
			v = append(v, fmt.Sprintf("no grant within %v after the %s at %.2f s cleared", r.Bound, rc.Kind, rc.At.Seconds()))
		}
	}
	for _, e := range r.Elections {
		v = append(v, e.Violations...)
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
	for _, l := range r.Locks {
		fmt.Fprintf(w, "  %s\n", l.Lock)
		paused := ""
		if l.MostPaused > l.MostAtOnce {
			paused = fmt.Sprintf(" (%d with paused ones)", l.MostPaused)
		}
		fmt.Fprintf(w, "    %d grants, %d shared; at most %d holders at once%s; longest without a holder %.2f s\n",
			l.Grants, l.SharedGrants, l.MostAtOnce, paused, l.LongestGap.Seconds())
		for _, ws := range r.Workers {
			if ws.Lock == l.Lock.Name {
				fmt.Fprintf(w, "    %-18s %3d grants, %3d shared%s\n", ws.Name, ws.Grants, ws.SharedGrants, failures(ws.Failures))
			}
		}
	}
	fmt.Fprintf(w, "  more holders than a lock allows   %d times without a pause (0 required), %d with a holder paused\n",
		len(r.Breaches), len(r.PausedBreaches))
	fmt.Fprintf(w, "  fenced writes   %d accepted, %d stale rejected, %d stale accepted (0 required), %d from a live holder rejected (0 required)\n",
		r.WritesAccepted, r.StaleRejected, r.StaleAccepted, r.HolderFenced)
	order := "increasing over every conflicting grant"
	if r.OutOfOrder > 0 {
		order = fmt.Sprintf("%d grants out of order", r.OutOfOrder)
	}
	fmt.Fprintf(w, "  tokens          %s across %d grants\n", order, r.Grants)
	fmt.Fprintf(w, "  bound without a holder   %.0f s beyond the time faults kept the servers down\n", r.Bound.Seconds())
	for _, rc := range r.Recoveries {
		after := "no grant before the end"
		if rc.After >= 0 {
			after = fmt.Sprintf("first grant %.2f s later", rc.After.Seconds())
		}
		fmt.Fprintf(w, "  %-11s at %6.2f s: %s\n", rc.Kind, rc.At.Seconds(), after)
	}
	for _, e := range r.Elections {
		ds := slices.Clone(e.Delivery)
		slices.Sort(ds)
		fmt.Fprintf(w, "  %s: %d watchers, %d observations of %d terms; delivery p50 %v, max %v; stale-leader bound %v\n",
			e.Lock, e.Watchers, e.Observations, e.Terms, percentile(ds, 0.5), percentile(ds, 1), e.Bound)
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

// String says which holders believed they held at once, and what the lock
// allows.
func (b Breach) String() string {
	allowed := "an exclusive holder alone"
	if b.Lock.Limit > 0 {
		allowed += fmt.Sprintf(", or %d shared", b.Lock.Limit)
	} else if b.Lock.Exclusive < 1 {
		allowed += ", or any number of shared"
	}
	var hs []string
	for _, h := range b.Holders {
		mode := "exclusive"
		if h.Shared {
			mode = "shared"
		}
		hs = append(hs, fmt.Sprintf("%s %s token %d [%.3fs, %.3fs]", h.Worker, mode, h.Token, h.Start.Seconds(), h.End.Seconds()))
	}
	return fmt.Sprintf("%d holders of %s at once for %v from %.3fs (allowed: %s): %s",
		b.Most, b.Lock.Name, (b.To - b.From).Round(time.Millisecond), b.From.Seconds(), allowed, strings.Join(hs, ", "))
}

// percentile is the q-quantile of sorted ds (0 for none), to the millisecond.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[int(q*float64(len(ds)-1))].Round(time.Millisecond)
}

// workersOn returns the workers contending for lock.
func (r *run) workersOn(lock string) []*worker {
	var out []*worker
	for _, w := range r.workers {
		if w.lock.Name == lock {
			out = append(out, w)
		}
	}
	return out
}
