package election

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/monolock/monolock/bench/internal/safety"
	"github.com/monolock/monolock/bench/internal/stats"
	"github.com/monolock/monolock/conformance/proxy"
	"github.com/monolock/monolock/conformance/wire"
)

// Options are one measurement's knobs.
type Options struct {
	Lease     time.Duration // every recipe's lease / TTL
	Runs      int           // runs per system of the resign, crash and split scenarios
	Parallel  int           // crash and split runs of one system at once
	Followers int           // observers in the resign, crash and watch scenarios
	Proclaims int           // values proclaimed per system in the watch scenario
	Rounds    int           // the watch scenario's runs per system, among which Proclaims is shared
	Pace      time.Duration // from one Proclaim call's start to the next
	// Log reports each run as it ends.
	Log func(format string, a ...any)
}

// window bounds the wait for the events after a resign or a fault: two
// leases beyond the longest expected (a lease, plus etcd's 500 ms expiry
// tick), so a slow event is measured rather than cut off.
func (o Options) window() time.Duration { return 4 * o.Lease }

// Measure runs the four scenarios on every recipe. The systems alternate
// run by run (the crash and split scenarios batch by batch, a batch being
// Parallel concurrent runs of one system), so that every system sees the
// same machine.
func Measure(ctx context.Context, recs []Recipe, o Options) []System {
	stamp := time.Now().UnixNano()
	name := func(scenario string, rec Recipe, k int) string {
		return fmt.Sprintf("election-%s-%s-%d-%d", scenario, safety.Slug(rec.Name), k, stamp)
	}
	out := make([]System, len(recs))
	for i, rec := range recs {
		out[i].System = rec.Name
	}
	for k := 0; k < o.Runs && ctx.Err() == nil; k++ {
		for i, rec := range recs {
			h := resignRun(ctx, rec, o, name("resign", rec, k))
			o.Log("election   %-9s resign %2d: %s", rec.Name, k, h)
			out[i].Resign = append(out[i].Resign, h)
		}
	}
	crashes := batched(ctx, recs, o, func(rec Recipe, k int) Handover {
		h := crashRun(ctx, rec, o, name("crash", rec, k))
		o.Log("election   %-9s crash  %2d: %s", rec.Name, k, h)
		return h
	})
	deliveries := watchRounds(ctx, recs, o, name)
	splits := batched(ctx, recs, o, func(rec Recipe, k int) Split {
		s := splitRun(ctx, rec, o, name("split", rec, k))
		o.Log("election   %-9s split  %2d: %s", rec.Name, k, s)
		return s
	})
	for i := range out {
		out[i].Crash, out[i].Watch, out[i].Split = crashes[i], deliveries[i], splits[i]
	}
	return out
}

// batched calls run for every recipe and run number, Parallel runs of one
// recipe at once, the recipes taking turns batch by batch; it returns the
// results by recipe, in run order.
func batched[R any](ctx context.Context, recs []Recipe, o Options, run func(rec Recipe, k int) R) [][]R {
	out := make([][]R, len(recs))
	par := max(1, o.Parallel)
	for first := 0; first < o.Runs && ctx.Err() == nil; first += par {
		n := min(par, o.Runs-first)
		for i, rec := range recs {
			got := make([]R, n)
			var wg sync.WaitGroup
			for j := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// Each run starts at a random moment within a lease: runs
					// started together would share the phase of their clients'
					// periodic checks (etcd's client checks its lease deadline
					// every 500 ms from its start) against the server's (etcd
					// expires leases on a 500 ms tick), and repeat one draw.
					select {
					case <-time.After(rand.N(o.Lease)):
					case <-ctx.Done():
					}
					got[j] = run(rec, first+j)
				}()
			}
			wg.Wait()
			out[i] = append(out[i], got...)
		}
	}
	return out
}

// candidateSettle is how long B has waited behind A before A resigns.
const candidateSettle = 250 * time.Millisecond

// resignRun is scenario 1: A resigns; how soon B is elected and every
// follower knows, from the start of the Resign call.
func resignRun(ctx context.Context, rec Recipe, o Options, name string) Handover {
	s, err := setUp(ctx, rec, name, rec.Upstream, o.Followers, true)
	if err != nil {
		return Handover{Err: err.Error()}
	}
	defer s.close()
	// A standby candidate has waited a while before its leader resigns.
	// etcd's candidate watches its predecessor's key from the revision it
	// read, and the server catches such a watch up on a 100 ms loop before
	// it gets events as they happen: a resign inside that time would be
	// timed by the loop.
	select {
	case <-time.After(candidateSettle):
	case <-ctx.Done():
		return Handover{Err: "interrupted"}
	}
	from := time.Now()
	rctx, cancel := context.WithTimeout(ctx, o.window())
	defer cancel()
	if err := s.aTerm.Resign(rctx); err != nil {
		return Handover{Err: "resign: " + err.Error()}
	}
	return s.handover(ctx, from, o.window())
}

// crashRun is scenario 2: A's link is reset and stays dead (the process
// lives on); how soon B is elected and every follower knows.
func crashRun(ctx context.Context, rec Recipe, o Options, name string) Handover {
	p, err := proxy.Listen(rec.Upstream, time.Now())
	if err != nil {
		return Handover{Err: "proxy: " + err.Error()}
	}
	s, err := setUp(ctx, rec, name, p.Addr(), o.Followers, true)
	if err != nil {
		p.Close()
		return Handover{Err: err.Error()}
	}
	defer s.close()
	defer p.Close() // first: the leader's close then fails fast
	if err := s.atRandomPhase(ctx, o.Lease); err != nil {
		return Handover{Err: err.Error()}
	}
	from := time.Now()
	// Blackholed first, so that the connections A's client opens again
	// (etcd's does) carry nothing: the link is dead, not just reset.
	p.Set(blackholeBoth())
	p.Reset()
	return s.handover(ctx, from, o.window())
}

// splitRun is scenario 4: A's link drops every byte, sockets open; when A
// is told it lost and when B is elected.
func splitRun(ctx context.Context, rec Recipe, o Options, name string) Split {
	p, err := proxy.Listen(rec.Upstream, time.Now())
	if err != nil {
		return Split{Err: "proxy: " + err.Error()}
	}
	s, err := setUp(ctx, rec, name, p.Addr(), 0, true)
	if err != nil {
		p.Close()
		return Split{Err: err.Error()}
	}
	defer s.close()
	defer p.Close()
	if err := s.atRandomPhase(ctx, o.Lease); err != nil {
		return Split{Err: err.Error()}
	}
	from := time.Now()
	p.Set(blackholeBoth())
	return s.split(ctx, from, o.window())
}

func blackholeBoth() proxy.Faults {
	var f proxy.Faults
	f.Blackhole[wire.Up], f.Blackhole[wire.Down] = true, true
	return f
}

// atRandomPhase waits for a random point of the leader's refresh cycle
// (lease/4 for monolock, TTL/3 for etcd), anywhere in half a lease after a
// quarter of one, as the safety workload does: runs faulted at one phase
// would repeat one draw instead of sampling it. Nothing may have changed
// meanwhile.
func (s *stage) atRandomPhase(ctx context.Context, lease time.Duration) error {
	select {
	case <-time.After(lease/4 + rand.N(lease/2)):
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case r := <-s.bElected:
		s.bElected <- r // for close: its term is its participant's
		return fmt.Errorf("the candidate was elected before the fault (%v)", r.err)
	case <-s.aTerm.Lost():
		return fmt.Errorf("the leader lost before the fault")
	default:
		return nil
	}
}

// handover waits, up to window after from, for B's election and then for
// every follower to report B.
func (s *stage) handover(ctx context.Context, from time.Time, window time.Duration) Handover {
	timer := time.NewTimer(time.Until(from.Add(window)))
	defer timer.Stop()
	var h Handover
	select {
	case r := <-s.bElected:
		if r.err != nil {
			return Handover{Err: "candidate: " + r.err.Error()}
		}
		h.Elected = r.at.Sub(from)
	case <-timer.C:
		return Handover{Err: fmt.Sprintf("the candidate was not elected within %v", window)}
	case <-ctx.Done():
		return Handover{Err: "interrupted"}
	}
	last, n := lastSeen(ctx, s.followers, candidateValue, from.Add(window))
	h.Knowing = n
	if n < len(s.followers) {
		h.Err = fmt.Sprintf("%d of %d followers reported the new leader within %v", n, len(s.followers), window)
		return h
	}
	h.AllKnow = last.Sub(from)
	return h
}

// split waits, up to window after from, for A's loss signal and B's
// election.
func (s *stage) split(ctx context.Context, from time.Time, window time.Duration) Split {
	timer := time.NewTimer(time.Until(from.Add(window)))
	defer timer.Stop()
	var out Split
	lost, elected := s.aTerm.Lost(), s.bElected
	for lost != nil || elected != nil {
		select {
		case <-lost:
			out.HasLost, out.Lost, lost = true, time.Since(from), nil
		case r := <-elected:
			if r.err != nil {
				return Split{Err: "candidate: " + r.err.Error()}
			}
			out.HasElected, out.Elected, elected = true, r.at.Sub(from), nil
		case <-timer.C:
			return out
		case <-ctx.Done():
			return Split{Err: "interrupted"}
		}
	}
	return out
}

// watchRounds is scenario 3, Rounds runs per system taking turns, each
// proclaiming its share of Proclaims values.
func watchRounds(ctx context.Context, recs []Recipe, o Options, name func(string, Recipe, int) string) []Delivery {
	rounds := max(1, o.Rounds)
	samples, calls := make([][]time.Duration, len(recs)), make([][]time.Duration, len(recs))
	out := make([]Delivery, len(recs))
	start := time.Now()
	for k := 0; k < rounds && ctx.Err() == nil; k++ {
		for i, rec := range recs {
			n := o.Proclaims/rounds + boolInt(k < o.Proclaims%rounds)
			r := watchRun(ctx, rec, o, name("watch", rec, k), n)
			o.Log("election   %-9s watch  %2d: %d values, %d followers: %d seen, %d missed %s", rec.Name, k, n, o.Followers, len(r.samples), r.missed, r.err)
			samples[i], calls[i] = append(samples[i], r.samples...), append(calls[i], r.calls...)
			out[i].Proclaims += len(r.calls)
			out[i].Missed += r.missed
			if out[i].Err == "" {
				out[i].Err = r.err
			}
		}
	}
	elapsed := time.Since(start)
	for i := range out {
		out[i].Followers = o.Followers
		out[i].Latency = stats.Summarise(samples[i], elapsed, 0)
		out[i].Call = stats.Summarise(calls[i], elapsed, 0)
	}
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// watched is one watch run's figures.
type watched struct {
	samples, calls []time.Duration
	missed         int
	err            string
}

// watchRun has A proclaim n values, one every Pace, and collects each
// follower's delay to see each one, from its Proclaim call's start.
func watchRun(ctx context.Context, rec Recipe, o Options, name string, n int) watched {
	s, err := setUp(ctx, rec, name, rec.Upstream, o.Followers, false)
	if err != nil {
		return watched{err: err.Error()}
	}
	defer s.close()
	var w watched
	starts := make([]time.Time, 0, n)
	for i := range n {
		at := time.Now()
		pctx, cancel := context.WithTimeout(ctx, setupTimeout)
		err := s.aTerm.Proclaim(pctx, proclaimed(i))
		cancel()
		if err != nil {
			w.err = fmt.Sprintf("proclaim %d: %v", i, err)
			break
		}
		starts = append(starts, at)
		w.calls = append(w.calls, time.Since(at))
		select {
		case <-time.After(time.Until(at.Add(o.Pace))):
		case <-ctx.Done():
			return watched{err: "interrupted"}
		}
	}
	if len(starts) > 0 {
		// The last value is the one most likely still in flight.
		lastSeen(ctx, s.followers, proclaimed(len(starts)-1), time.Now().Add(o.Lease))
	}
	for i, at := range starts {
		for _, f := range s.followers {
			if seen, ok := f.seenAt(proclaimed(i)); ok {
				w.samples = append(w.samples, seen.Sub(at))
			} else {
				w.missed++
			}
		}
	}
	return w
}

func proclaimed(i int) string { return fmt.Sprintf("v%d", i+1) }

func (h Handover) String() string {
	if h.Err != "" && h.Elected == 0 {
		return "failed: " + h.Err
	}
	s := fmt.Sprintf("elected after %v, all %d followers knew after %v", round(h.Elected), h.Knowing, round(h.AllKnow))
	if h.Err != "" {
		s = fmt.Sprintf("elected after %v; %s", round(h.Elected), h.Err)
	}
	return s
}

func (s Split) String() string {
	if s.Err != "" {
		return "failed: " + s.Err
	}
	event := func(ok bool, d time.Duration) string {
		if !ok {
			return "never"
		}
		return "after " + round(d).String()
	}
	out := fmt.Sprintf("A told %s, B elected %s", event(s.HasLost, s.Lost), event(s.HasElected, s.Elected))
	if w, ok := s.Window(); ok {
		out += fmt.Sprintf(": window %v", round(w))
	}
	return out
}

func round(d time.Duration) time.Duration {
	if d > 10*time.Millisecond || d < -10*time.Millisecond {
		return d.Round(time.Millisecond)
	}
	return d.Round(10 * time.Microsecond)
}
