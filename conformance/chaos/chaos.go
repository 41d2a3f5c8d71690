// Package chaos runs workers of every client language against a monolock
// cell while it injects faults, and checks what a lock service promises:
// never more holders at once than a lock allows (an exclusive holder
// alone, or shared holders up to a semaphore's limit), unless a holder's
// process was paused, which no lock service can see; no stale write
// accepted by a fenced resource; tokens that only grow; and a cell that
// recovers.
//
// A worker is one conformance driver process (the client's public API over
// the pipe protocol of docs/writing-a-client.md) that acquires one lock
// name in a loop, holds it for a random time and releases it. Its claims
// are exclusive, or shared (with the lock's limit on a semaphore) by the
// lock's mix. While it holds, it writes to a fenced resource kept here,
// which turns away tokens below those of conflicting writes it has
// accepted. Each worker reaches every server through fault proxies of its
// own. The analyser (holders.go) checks that no more claims believed they
// held a lock at one instant than the lock allows.
//
// It lives in the conformance module, beside the driver, proxy, runner and
// wire packages it is made of, and not in bench/: it is a correctness gate
// (test:all runs it), and the benchmark module would make that gate build
// the benchmark's peer clients (Redis, PostgreSQL, ZooKeeper) and its
// plotting. A module of its own would have to require conformance and go
// anyway and would add a go.mod for nothing. The cell comes from
// go/testkit/cell, as it does for the HA tests and the benchmark; its etcd
// client is the one dependency this package adds to the module.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/monolock/monolock/conformance/runner"
)

// Config is one chaos run.
type Config struct {
	Root     string          // repository root: drivers run in their clients' folders
	Clients  []runner.Client // one worker per entry (repeat an entry for more)
	Locks    []Lock          // worker i contends for Locks[i % len(Locks)]
	Cell     *Cell
	Lease    time.Duration // every worker's lease
	EtcdTTL  time.Duration // the HA cell's etcd TTL (failover waits for it)
	Duration time.Duration
	Pauses   bool // stop holders' processes too (overlaps they cause are reported, not failed)
	// Sessions puts every second worker's claims on a session (protocol
	// version 4) when its driver has the sessions capability: sessions
	// beside single claims, under the same faults.
	Sessions bool
	Faults   []string // fault kinds to inject (empty: every kind the cell allows)
	Seed     uint64   // faults, hold times
	Log      io.Writer
}

type run struct {
	cfg     Config
	start   time.Time
	workers []*worker
	ledger  *ledger
	logMu   sync.Mutex
}

func (r *run) now() time.Duration { return time.Since(r.start) }

func (r *run) logf(format string, args ...any) {
	if r.cfg.Log == nil {
		return
	}
	r.logMu.Lock()
	fmt.Fprintf(r.cfg.Log, format+"\n", args...)
	r.logMu.Unlock()
}

// Run runs the workers and the faults for cfg.Duration, then lets every
// worker release and reports.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Lease <= 0 || cfg.Duration <= 0 || len(cfg.Clients) == 0 || len(cfg.Locks) == 0 {
		return nil, errors.New("chaos: need a lease, a duration, at least one client and one lock")
	}
	r := &run{cfg: cfg, start: time.Now(), ledger: &ledger{}}
	sched := newScheduler(r)
	if len(sched.kinds) == 0 {
		return nil, fmt.Errorf("chaos: none of the faults %v applies to %s", cfg.Faults, cfg.Cell.Describe())
	}
	defer func() {
		for _, w := range r.workers {
			w.close()
		}
	}()
	for i, c := range cfg.Clients {
		name := fmt.Sprintf("%s#%d", c.Name, i)
		w, err := startWorker(ctx, cfg.Root, c, name, cfg.Locks[i%len(cfg.Locks)], cfg.Cell.Addrs(), r.start, cfg.Sessions && i%2 == 1)
		if err != nil {
			return nil, err
		}
		w.ledger, w.lease = r.ledger, cfg.Lease
		w.rng = rand.New(rand.NewPCG(cfg.Seed, uint64(i)+3))
		r.workers = append(r.workers, w)
	}
	r.logf("chaos: %d workers on %s, lease %v, %v, seed %d", len(r.workers), cfg.Cell.Describe(), cfg.Lease, cfg.Duration, cfg.Seed)
	for _, l := range cfg.Locks {
		r.logf("  %s", l)
	}

	faultCtx, stopFaults := context.WithCancel(ctx)
	faultsDone := make(chan struct{})
	go func() { sched.loop(faultCtx); close(faultsDone) }()

	workCtx, stopWork := context.WithCancel(ctx)
	errs := make([]error, len(r.workers))
	var wg sync.WaitGroup
	for i, w := range r.workers {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = w.run(workCtx) }()
	}
	select {
	case <-time.After(cfg.Duration):
	case <-ctx.Done():
	}
	stopFaults()
	<-faultsDone // every fault cleared, every process running again
	end := r.now()
	stopWork()
	wg.Wait()

	rep := r.report(end, sched)
	for _, err := range errs {
		if err != nil {
			rep.WorkerErrors = append(rep.WorkerErrors, err.Error())
		}
	}
	return rep, nil
}
