package safety

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/monolock/monolock/conformance/proxy"
	"github.com/monolock/monolock/conformance/wire"
)

// Fault is what happens to the holder's link, and only to it.
type Fault string

// The faults, in report order.
const (
	BlackholeUp   Fault = "blackhole-up"   // holder -> server dropped, FIN included
	BlackholeDown Fault = "blackhole-down" // server -> holder dropped, FIN included
	BlackholeBoth Fault = "blackhole-both"
	DelayDown     Fault = "delay-down" // server -> holder delayed by Options.Delay
	Reset         Fault = "reset"      // both ends of the holder's connections get a RST
)

// Faults lists every fault in report order.
var Faults = []Fault{BlackholeUp, BlackholeDown, BlackholeBoth, DelayDown, Reset}

// Trial is one holder and one competitor of one recipe, on one lock name.
// Told and Granted each deliver at most one instant, taken from this
// process's monotonic clock (time.Now) when the event happened.
type Trial interface {
	// Hold acquires the lock through addr, the fault proxy, and returns
	// once it is held and its signal is being watched.
	Hold(ctx context.Context, addr string) error
	// Compete starts the competitor on its direct link and returns once it
	// waits for the lock (or, for a recipe without a queue, has tried).
	Compete(ctx context.Context) error
	// Told delivers the instant the holder's recipe told it the lock was lost.
	Told() <-chan time.Time
	// Granted delivers the instant the competitor was granted the lock.
	Granted() <-chan time.Time
	// Close ends both sides within a few seconds; the proxy is closed first.
	Close()
}

// Recipe is one system's way of holding a lock and of telling its loss.
type Recipe struct {
	Name     string // row label, e.g. "etcd"
	Signal   string // what the holder watches, for the report
	Upstream string // the server the proxy forwards to
	// New makes a trial on a fresh lock name.
	New func(name string) Trial
}

// Options are one measurement's knobs.
type Options struct {
	Lease  time.Duration // lease / TTL / session timeout of every recipe
	Runs   int           // runs per cell
	Delay  time.Duration // the extra delay of DelayDown
	Window time.Duration // how long to watch after the fault (and after a grant to an untold holder)
	Faults []Fault
	// Parallel bounds the runs in flight at once; 0 means all of them.
	Parallel int
}

// Cell is the measured runs of one recipe under one fault.
type Cell struct {
	Fault Fault `json:"fault"`
	Runs  []Run `json:"runs"`
}

// Measure runs every fault of o.Faults o.Runs times on rec. The runs are
// independent (each its own lock name, proxy and connections, started at
// a random moment within a lease) and run concurrently, o.Parallel at a
// time, so a recipe's cells take about as long as its slowest run. Runs
// that cannot be set up are recorded with their error.
func Measure(ctx context.Context, rec Recipe, o Options) []Cell {
	stamp := time.Now().UnixNano()
	runs := ForEachRun(ctx, o.Faults, o.Runs, o.Parallel, o.Lease, Run{Err: "interrupted"}, func(f Fault, k int) Run {
		name := fmt.Sprintf("safety-%s-%s-%d-%d", Slug(rec.Name), f, k, stamp)
		return runOne(ctx, rec, f, o, name)
	})
	cells := make([]Cell, len(o.Faults))
	for i, f := range o.Faults {
		cells[i] = Cell{Fault: f, Runs: runs[i]}
	}
	return cells
}

// ForEachRun calls run for every fault of faults, runs times each, all
// concurrently (parallel at a time when parallel > 0), and returns the
// results by fault and run. A run whose start ctx ends first gets
// interrupted instead. Each starts at a random moment within a lease: runs
// started together would share the phase of their clients' periodic
// checks against the server's (etcd's client checks its deadline once a
// second from its start, its server expires leases on a 500 ms tick), and
// their figures would repeat one draw instead of sampling it.
func ForEachRun[R any](ctx context.Context, faults []Fault, runs, parallel int, lease time.Duration, interrupted R, run func(f Fault, k int) R) [][]R {
	out := make([][]R, len(faults))
	if parallel <= 0 {
		parallel = len(faults) * runs
	}
	sem := make(chan struct{}, max(1, parallel))
	var wg sync.WaitGroup
	for i, f := range faults {
		out[i] = make([]R, runs)
		for k := range runs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				select {
				case sem <- struct{}{}:
				case <-ctx.Done():
					out[i][k] = interrupted
					return
				}
				defer func() { <-sem }()
				select {
				case <-time.After(rand.N(lease)):
				case <-ctx.Done():
					out[i][k] = interrupted
					return
				}
				out[i][k] = run(f, k)
			}()
		}
	}
	wg.Wait()
	return out
}

// Slug keeps the letters and digits of a label, lower-cased, for lock
// and file names.
func Slug(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return '-'
	}, s)
}

// setupTimeout bounds each of acquiring the holder's lock and queueing the
// competitor.
const setupTimeout = 20 * time.Second

// runOne is one run: hold through a fresh proxy, queue a competitor, wait a
// random part of the refresh cycle, inject f, watch for the two events.
func runOne(ctx context.Context, rec Recipe, f Fault, o Options, name string) Run {
	p, err := proxy.Listen(rec.Upstream, time.Now())
	if err != nil {
		return Run{Err: "proxy: " + err.Error()}
	}
	tr := rec.New(name)
	defer func() {
		p.Close()
		tr.Close()
	}()
	hctx, cancel := context.WithTimeout(ctx, setupTimeout)
	err = tr.Hold(hctx, p.Addr())
	cancel()
	if err != nil {
		return Run{Err: "holder: " + err.Error()}
	}
	cctx, cancel := context.WithTimeout(ctx, setupTimeout)
	err = tr.Compete(cctx)
	cancel()
	if err != nil {
		return Run{Err: "competitor: " + err.Error()}
	}
	// The fault falls at a random point of the holder's refresh cycle
	// (lease/4 for monolock and Redis, TTL/3 for etcd, a third of the
	// session timeout for ZooKeeper): anywhere in half a lease after a
	// quarter of one.
	phase := o.Lease/4 + rand.N(o.Lease/2)
	select {
	case <-time.After(phase):
	case <-ctx.Done():
		return Run{Err: "interrupted"}
	}
	// Neither event may have happened before the fault.
	select {
	case <-tr.Told():
		return Run{Err: "the holder was told of a loss before the fault"}
	case <-tr.Granted():
		return Run{Err: "the competitor was granted before the fault"}
	default:
	}
	fault := time.Now()
	Inject(p, f, o.Delay)
	told, granted, end := watch(ctx, tr, fault, o.Window)
	if ctx.Err() != nil {
		return Run{Err: "interrupted"}
	}
	return outcome(fault, told, granted, end)
}

// Inject applies f to every connection of p, present and future: the proxy
// carries the holder's connections only.
func Inject(p *proxy.Proxy, f Fault, delay time.Duration) {
	var fs proxy.Faults
	switch f {
	case BlackholeUp:
		fs.Blackhole[wire.Up] = true
	case BlackholeDown:
		fs.Blackhole[wire.Down] = true
	case BlackholeBoth:
		fs.Blackhole[wire.Up], fs.Blackhole[wire.Down] = true, true
	case DelayDown:
		fs.Delay[wire.Down] = delay
	case Reset:
		p.Reset()
		return
	}
	p.Set(fs)
}

// watch waits for the holder to be told and the competitor to be granted,
// until window after the fault; when the competitor is granted and the
// holder not yet told, it waits up to window after the grant for the tell,
// so a late tell is measured instead of cut off.
func watch(ctx context.Context, tr Trial, fault time.Time, window time.Duration) (told, granted, end time.Time) {
	toldc, grantedc := tr.Told(), tr.Granted()
	deadline := fault.Add(window)
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for toldc != nil || grantedc != nil {
		select {
		case told = <-toldc:
			toldc = nil
		case granted = <-grantedc:
			grantedc = nil
			if toldc != nil {
				if d := granted.Add(window); d.After(deadline) {
					deadline = d
					timer.Reset(time.Until(deadline))
				}
			}
		case <-timer.C:
			return told, granted, time.Now()
		case <-ctx.Done():
			return told, granted, time.Now()
		}
	}
	return told, granted, time.Now()
}

// errNotQueued is returned by Compete when the competitor did not queue.
var errNotQueued = errors.New("competitor not queued in time")
