package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"syscall"
	"time"

	"github.com/monolock/monolock/conformance/proxy"
	"github.com/monolock/monolock/conformance/wire"
)

// Fault kinds. Link faults hit one worker's connections (the holder's, when
// there is one), through its proxies; the others hit a process.
const (
	FaultDelay     = "delay"       // both directions slowed by up to 1.2 leases
	FaultBlackhole = "blackhole"   // nothing passes, closes included, for 1.2-2.5 leases
	FaultReset     = "reset"       // every connection aborted with a TCP reset
	FaultFragment  = "fragment"    // every write split into single bytes
	FaultPause     = "pause"       // the holder's process stopped for 1.2-2 leases
	FaultRestart   = "restart"     // one server: kill -9, start again
	FaultCutCrash  = "cut+crash"   // one server: cut the holder off, then kill -9 and restart the server
	FaultKill      = "kill"        // HA: kill -9 the active server, start it again later
	FaultStop      = "stop"        // HA: SIGSTOP the active server for longer than the etcd TTL, then SIGCONT
	FaultEtcdCut   = "etcd-cut"    // HA: cut the active server off from etcd; its clients still reach it
	FaultClientCut = "client-cut"  // HA: cut the active server off from every client; it still reaches etcd
	FaultEtcdLead  = "etcd-leader" // HA: kill -9 etcd's raft leader, start it again once another leads
	FaultQuorum    = "quorum"      // HA: kill -9 two etcd members of three for a while
)

// FaultRecord is one injected fault.
type FaultRecord struct {
	Kind   string
	At     time.Duration // since the run's start
	Target string
	For    time.Duration
	Note   string
}

// Outage is a fault that stopped the server side: the time from it to the
// first grant after it is the cell's recovery (failover in HA). Cleared is
// when the fault itself was undone (a restarted server, restored links):
// at At for a fault the other servers are expected to take over from.
type Outage struct {
	Kind    string
	At      time.Duration
	Cleared time.Duration
}

// outage records an outage starting now; call the result when it clears.
func (s *scheduler) outage(kind string) (cleared func()) {
	s.outages = append(s.outages, Outage{Kind: kind, At: s.run.now()})
	i := len(s.outages) - 1
	return func() { s.outages[i].Cleared = s.run.now() }
}

type scheduler struct {
	run     *run
	rng     *rand.Rand
	kinds   []string
	queue   []string
	records []FaultRecord
	outages []Outage
	etcd    []time.Duration // etcd's own leader elections measured
}

func newScheduler(r *run) *scheduler {
	s := &scheduler{run: r, rng: rand.New(rand.NewPCG(r.cfg.Seed, 2))}
	s.kinds = []string{FaultDelay, FaultBlackhole, FaultReset, FaultFragment}
	if r.cfg.Pauses {
		s.kinds = append(s.kinds, FaultPause)
	}
	if r.cfg.Cell.HA() {
		s.kinds = append(s.kinds, FaultKill, FaultStop, FaultEtcdCut, FaultClientCut, FaultEtcdLead, FaultQuorum)
	} else {
		s.kinds = append(s.kinds, FaultRestart, FaultCutCrash)
	}
	if len(r.cfg.Faults) > 0 {
		s.kinds = slices.DeleteFunc(s.kinds, func(k string) bool { return !slices.Contains(r.cfg.Faults, k) })
	}
	return s
}

// next deals the kinds in rounds, each round shuffled, so that a short run
// still sees every kind.
func (s *scheduler) next() string {
	if len(s.queue) == 0 {
		s.queue = append(s.queue, s.kinds...)
		s.rng.Shuffle(len(s.queue), func(i, j int) { s.queue[i], s.queue[j] = s.queue[j], s.queue[i] })
	}
	k := s.queue[0]
	s.queue = s.queue[1:]
	return k
}

// loop injects one fault at a time, with a quiet gap before each, until
// ctx ends; the fault under way is finished and cleared.
func (s *scheduler) loop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.scale(0.5, 1.5)):
		}
		if ctx.Err() != nil {
			return
		}
		if err := s.inject(ctx, s.next()); err != nil {
			s.run.logf("fault: %v", err)
		}
	}
}

// scale returns a random duration between lo and hi leases.
func (s *scheduler) scale(lo, hi float64) time.Duration {
	return time.Duration(float64(s.run.cfg.Lease) * (lo + (hi-lo)*s.rng.Float64()))
}

// target picks the worker that holds the lock now, else any.
func (s *scheduler) target() *worker {
	ws := s.run.workers
	var holders []*worker
	for _, w := range ws {
		if w.holding() != nil {
			holders = append(holders, w)
		}
	}
	if len(holders) > 0 {
		return holders[s.rng.IntN(len(holders))]
	}
	return ws[s.rng.IntN(len(ws))]
}

func (s *scheduler) record(kind, target string, d time.Duration, note string) {
	r := FaultRecord{Kind: kind, At: s.run.now(), Target: target, For: d, Note: note}
	s.records = append(s.records, r)
	s.run.logf("%7.2fs  %-11s %-16s %-7s %s", r.At.Seconds(), kind, target, fmtDur(d), note)
}

func (s *scheduler) inject(ctx context.Context, kind string) error {
	r := s.run
	switch kind {
	case FaultDelay:
		w, d := s.target(), s.scale(1, 3)
		delay := s.scale(0.2, 1.2)
		s.record(kind, w.name, d, "by "+fmtDur(delay))
		w.setFaults(proxy.Faults{Delay: [2]time.Duration{wire.Up: delay, wire.Down: delay}})
		sleep(ctx, d)
		w.setFaults(proxy.Faults{})
	case FaultBlackhole:
		w, d := s.target(), s.scale(1.2, 2.5)
		s.record(kind, w.name, d, "")
		w.setFaults(proxy.Faults{Blackhole: [2]bool{true, true}})
		sleep(ctx, d)
		w.setFaults(proxy.Faults{})
	case FaultReset:
		w := s.target()
		s.record(kind, w.name, 0, "")
		w.reset()
	case FaultFragment:
		w, d := s.target(), s.scale(1, 3)
		s.record(kind, w.name, d, "")
		w.setFaults(proxy.Faults{Fragment: [2]bool{true, true}})
		sleep(ctx, d)
		w.setFaults(proxy.Faults{})
	case FaultPause:
		w, d := s.target(), s.scale(1.2, 2)
		s.record(kind, w.name, d, "")
		return w.pause(d)
	case FaultRestart, FaultCutCrash:
		var cut *worker
		if kind == FaultCutCrash {
			cut = s.target()
			cut.setFaults(proxy.Faults{Blackhole: [2]bool{true, true}})
			sleep(ctx, s.scale(0.1, 0.3))
		}
		s.record(kind, "server", 0, "")
		r.cfg.Cell.Kill(0)
		cleared := s.outage(kind)
		sleep(ctx, 300*time.Millisecond)
		err := r.cfg.Cell.Restart(context.Background(), 0)
		cleared()
		if cut != nil {
			sleep(ctx, s.scale(1, 2))
			cut.setFaults(proxy.Faults{})
		}
		return err
	case FaultKill:
		i := r.cfg.Cell.Leader(ctx)
		if i < 0 {
			s.record(kind, "none", 0, "no active server to kill")
			return nil
		}
		s.record(kind, fmt.Sprintf("server %d", i), 0, "the active one")
		r.cfg.Cell.Kill(i)
		s.outage(kind)() // the other servers take over at once
		sleep(ctx, r.cfg.EtcdTTL+2*r.cfg.Lease)
		return r.cfg.Cell.Restart(context.Background(), i)
	case FaultStop, FaultEtcdCut, FaultClientCut:
		i := r.cfg.Cell.Leader(ctx)
		if i < 0 {
			s.record(kind, "none", 0, "no active server")
			return nil
		}
		// Longer than the etcd TTL plus a lease: another server takes over.
		d := 2*r.cfg.EtcdTTL + r.cfg.Lease
		s.record(kind, fmt.Sprintf("server %d", i), d, "the active one")
		cleared := s.outage(kind)
		switch kind {
		case FaultStop:
			cleared() // the other servers take over
			r.cfg.Cell.Signal(i, syscall.SIGSTOP)
			sleep(ctx, d)
			r.cfg.Cell.Signal(i, syscall.SIGCONT)
		case FaultEtcdCut:
			cleared() // the other servers take over
			r.cfg.Cell.CutFromEtcd(i, true)
			sleep(ctx, d)
			r.cfg.Cell.CutFromEtcd(i, false)
		case FaultClientCut:
			for _, w := range r.workers {
				w.proxies[i].Set(proxy.Faults{Blackhole: [2]bool{true, true}})
			}
			sleep(ctx, d)
			for _, w := range r.workers {
				w.proxies[i].Set(proxy.Faults{})
			}
			cleared() // it still leads: nobody else could take over
		}
	case FaultQuorum:
		lead, err := r.cfg.Cell.Etcd().Leader(ctx)
		if err != nil {
			return err
		}
		other := (lead + 1) % r.cfg.Cell.Etcd().Len()
		d := r.cfg.EtcdTTL + 2*r.cfg.Lease
		s.record(kind, fmt.Sprintf("etcd %d,%d", lead, other), d, "two of three members")
		cleared := s.outage(kind)
		r.cfg.Cell.Etcd().Kill(lead)
		r.cfg.Cell.Etcd().Kill(other)
		sleep(ctx, d)
		defer cleared()
		return errors.Join(r.cfg.Cell.Etcd().Restart(lead), r.cfg.Cell.Etcd().Restart(other))
	case FaultEtcdLead:
		d, err := r.cfg.Cell.Etcd().Elect(ctx)
		if err != nil {
			return err
		}
		s.etcd = append(s.etcd, d)
		s.record(kind, "etcd", 0, "new raft leader after "+fmtDur(d))
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

func fmtDur(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}
