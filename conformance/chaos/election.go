package chaos

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/monolock/monolock/go/testkit/pipe"
)

// An election lock's candidates are its workers' claims (their terms are
// the windows the overlap analysis already checks: terms never overlap),
// and each of those workers also watches the lock. The watchers' promises,
// checked here:
//
//   - order: the terms a watcher shows come in token order;
//   - no term missed: a term that began and ended while the watcher was
//     vouching for what it showed (no "unknown" around it, its process not
//     stopped) appears among what it showed;
//   - no stale leader: a watcher stops showing a leader at most the bound
//     after the next term was granted (as that term's candidate heard
//     it). The next grant, not the old candidate's own end, is the
//     measure: the server ends a term later than its candidate gives up
//     (the candidate stops at 0.8 x lease after its last acknowledged
//     heartbeat, the server a lease after the last one it received, and a
//     delayed link can bring that one late), and only the server's end is
//     the followers' to see; it comes before the next grant.
//
// The bound is max(the delivery bound measured in the run, 0.8 x the
// watch's lease), plus 0.05 x lease for the harness's own clock (it stamps
// an event when it reads the driver's line): a watcher that stops hearing
// from its server says "unknown" by 0.8 x lease after its last
// acknowledged heartbeat, and one that hears sees the end of a term one
// delivery after the server does. The delivery bound is measured on
// clean links only (no fault on the watcher or the servers from the grant
// to the watcher's observation): a client that shows stale leaders must
// not widen the bound it is judged by.

// Observation is one observed event of a watcher: what it said, when the
// harness read it.
type Observation struct {
	Watcher string
	At      time.Duration
	State   string // pipe.State*
	Token   uint64 // for a leader or a held-back leader with a token
}

// ElectionStats is what the watchers of one election lock saw.
type ElectionStats struct {
	Lock         string
	Watchers     int
	Terms        int
	Observations int
	Delivery     []time.Duration // per term and watcher that saw it: grant (as its candidate heard it) to the watcher's observation
	Bound        time.Duration
	Violations   []string
}

// minCheckedTerm is the shortest term the "no term missed" rule checks:
// a follower sees states, not every transient, and a term that ends
// within a moment of its grant may pass unseen between two looks.
const minCheckedTerm = 100 * time.Millisecond

// analyseElection checks the watchers of lock l against its terms ws.
func analyseElection(l Lock, ws []Window, watchers []*worker, faults []FaultRecord, lease time.Duration, end time.Duration) ElectionStats {
	st := ElectionStats{Lock: l.Name, Terms: len(ws)}
	byToken := map[uint64]Window{}
	for _, w := range ws {
		byToken[w.Token] = w
	}
	type watcherLog struct {
		name   string
		obs    []Observation
		pauses []span
	}
	var logs []watcherLog
	for _, w := range watchers {
		w.mu.Lock()
		logs = append(logs, watcherLog{w.name, slices.Clone(w.observed), slices.Clone(w.pauses)})
		w.mu.Unlock()
	}
	st.Watchers = len(logs)
	for _, lg := range logs {
		st.Observations += len(lg.obs)
		st.Delivery = append(st.Delivery, delivery(lg.obs, faultsOn(faults, lg.name), byToken)...)
	}
	st.Bound = max(maxDuration(st.Delivery), lease*8/10) + lease/20
	for _, lg := range logs {
		if len(lg.obs) == 0 {
			st.Violations = append(st.Violations, fmt.Sprintf("%s: watcher %s said nothing in the whole run", l.Name, lg.name))
			continue
		}
		st.Violations = append(st.Violations, tokenOrder(l, lg.name, lg.obs)...)
		st.Violations = append(st.Violations, staleLeaders(l, lg.name, lg.obs, lg.pauses, ws, st.Bound, end)...)
		st.Violations = append(st.Violations, missedTerms(l, lg.name, lg.obs, lg.pauses, ws, st.Bound)...)
	}
	return st
}

// delivery is, for each term a watcher showed with no fault on its way
// (faulted: the watcher's faults and the servers') while it vouched for
// its picture throughout (no "unknown" from the grant on), the time from
// the grant (the candidate's acquired event) to the watcher's first
// observation of it; a watcher that saw it first is 0.
func delivery(obs []Observation, faulted []span, byToken map[uint64]Window) []time.Duration {
	var out []time.Duration
	seen := map[uint64]bool{}
	for _, o := range obs {
		w, ok := byToken[o.Token]
		if o.Token == 0 || seen[o.Token] || !ok {
			continue
		}
		seen[o.Token] = true
		if stopped(faulted, w.Start, o.At) || (o.At > w.Start && !vouched(obs, w.Start, o.At-1)) {
			continue // a fault, or a watcher between connections, delays more than the delivery
		}
		out = append(out, max(o.At-w.Start, 0))
	}
	return out
}

// tokenOrder: the tokens a watcher shows never go back.
func tokenOrder(l Lock, watcher string, obs []Observation) []string {
	var v []string
	var last uint64
	for _, o := range obs {
		if o.Token == 0 {
			continue
		}
		if o.Token < last {
			v = append(v, fmt.Sprintf("%s: watcher %s showed token %d at %.3fs after token %d", l.Name, watcher, o.Token, o.At.Seconds(), last))
		}
		last = max(last, o.Token)
	}
	return v
}

// staleLeaders: an observation of a leader stays in force until the
// watcher's next one; it must not outlast the grant of a later term by
// more than the bound, unless the watcher's process was stopped meanwhile.
func staleLeaders(l Lock, watcher string, obs []Observation, pauses []span, ws []Window, bound, end time.Duration) []string {
	var v []string
	for i, o := range obs {
		if o.State != pipe.StateLeader {
			continue
		}
		next, ok := nextGrant(ws, o.Token)
		if !ok {
			continue // no later term: nothing made the leader stale
		}
		until := end
		if i+1 < len(obs) {
			until = obs[i+1].At
		}
		if until-next.Start > bound && !stopped(pauses, next.Start, until) {
			v = append(v, fmt.Sprintf("%s: watcher %s showed token %d as leader until %.3fs, %v after token %d was granted at %.3fs (bound %v)",
				l.Name, watcher, o.Token, until.Seconds(), (until-next.Start).Round(time.Millisecond), next.Token, next.Start.Seconds(), bound))
		}
	}
	return v
}

// nextGrant is the first term granted after token's: the term with the
// lowest token above it.
func nextGrant(ws []Window, token uint64) (Window, bool) {
	var next Window
	found := false
	for _, w := range ws {
		if w.Token > token && (!found || w.Token < next.Token) {
			next, found = w, true
		}
	}
	return next, found
}

// missedTerms: a term that the watcher could vouch for throughout (from
// the bound before its grant to the bound after its end) is among what it
// showed.
func missedTerms(l Lock, watcher string, obs []Observation, pauses []span, ws []Window, bound time.Duration) []string {
	var v []string
	for _, w := range ws {
		from, to := w.Start-bound, w.End+bound
		if w.End-w.Start < minCheckedTerm || stopped(pauses, from, to) || !vouched(obs, from, to) {
			continue
		}
		if !slices.ContainsFunc(obs, func(o Observation) bool { return o.Token == w.Token }) {
			v = append(v, fmt.Sprintf("%s: watcher %s never showed the term of token %d [%.3fs, %.3fs] (%s), though it vouched for its picture throughout",
				l.Name, watcher, w.Token, w.Start.Seconds(), w.End.Seconds(), w.Worker))
		}
	}
	return v
}

// vouched reports whether the watcher vouched for its picture throughout
// [from, to]: what it said last before from was known, and it said
// "unknown" at no point up to to.
func vouched(obs []Observation, from, to time.Duration) bool {
	before := -1
	for i, o := range obs {
		if o.At > to {
			break
		}
		if o.At <= from {
			before = i
			continue
		}
		if o.State == pipe.StateUnknown {
			return false
		}
	}
	return before >= 0 && obs[before].State != pipe.StateUnknown
}

// stopped reports whether a pause overlaps [from, to].
func stopped(pauses []span, from, to time.Duration) bool {
	return slices.ContainsFunc(pauses, func(p span) bool { return p.From < to && p.To > from })
}

func maxDuration(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

// faultsOn is when a fault could slow what watcher hears: its own faults,
// its pauses included, and every fault of the servers (a fault without a
// length lasts a moment and its aftermath: a second).
func faultsOn(faults []FaultRecord, watcher string) []span {
	var out []span
	for _, f := range faults {
		if f.Target != watcher && f.Target != "server" && !strings.HasPrefix(f.Target, "server") && !strings.Contains(f.Target, "etcd") {
			continue
		}
		out = append(out, span{f.At, f.At + max(f.For, time.Second)})
	}
	return out
}
