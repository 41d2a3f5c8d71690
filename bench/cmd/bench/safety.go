package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/monolock/monolock/bench/internal/drivers"
	"github.com/monolock/monolock/bench/internal/peersafety"
	"github.com/monolock/monolock/bench/internal/report"
	"github.com/monolock/monolock/bench/internal/safety"
	"github.com/monolock/monolock/bench/internal/systems"
	conformance "github.com/monolock/monolock/conformance/runner"
)

// safetyClients are the monolock clients of workload 6, in report order:
// every conformance driver (the Go one included: it prints lost from
// Lock.Done) and the Go client's polled check, in this process.
var safetyClients = []string{"go", "go-polled", "python-sync", "python-asyncio", "node", "rust-blocking", "rust-tokio", "java-gomobile"}

// safetySignals says what each driver prints its lost event from.
var safetySignals = map[string]string{
	"go":             "`Lock.Done()`",
	"python-sync":    "`Lock.add_lost_callback`",
	"python-asyncio": "`AsyncLock.add_lost_callback`",
	"node":           "`lock.signal` abort event",
	"rust-blocking":  "`LossWatch::wait()`",
	"rust-tokio":     "`LossWatch::wait().await`",
	"java-gomobile":  "`Lock.setLostListener`",
}

// safetyTarget is monolock's margin target, in leases.
const safetyTarget = 0.15

// safetyOptions is workload 6's measurement, for the plan and -safety-runs.
func (rn *runner) safetyOptions() safety.Options {
	lease := rn.plan.safetyLease
	return safety.Options{
		Lease:  lease,
		Runs:   rn.safetyRuns,
		Delay:  lease * 3 / 2,
		Window: 5 * lease,
		Faults: safety.Faults,
	}
}

func (rn *runner) safety() error {
	o := rn.safetyOptions()
	start := time.Now()
	info := &report.SafetyInfo{Lease: o.Lease, Runs: o.Runs, Delay: o.Delay, Window: o.Window, Target: safetyTarget,
		Libraries: peerLibraries(), SeparateRun: report.SeparateRun{Started: start, Command: commandLine(), LoadStart: loadavg()}}
	rn.r.SafetyRun = info
	defer func() {
		info.Duration = time.Since(start)
		info.LoadEnd = loadavg()
	}()

	if slices.Contains(rn.systems, systems.Monolock) {
		rn.safetyMonolock(o)
	}
	for _, sys := range rn.systems {
		var recs []safety.Recipe
		switch sys {
		case systems.Etcd:
			recs = []safety.Recipe{peersafety.Etcd(o.Lease)}
		case systems.Redis:
			recs = []safety.Recipe{peersafety.Redsync(o.Lease, true), peersafety.Redsync(o.Lease, false)}
		case systems.ZooKeeper:
			recs = []safety.Recipe{peersafety.ZooKeeper(o.Lease)}
		case systems.Postgres:
			recs = []safety.Recipe{peersafety.Postgres()}
		}
		for _, rec := range recs {
			rn.safetyRecipe(rec, false, o)
			if rn.ctx.Err() != nil {
				return rn.ctx.Err()
			}
		}
	}
	return rn.ctx.Err()
}

// safetyMonolock measures every wanted client against a fresh server each.
func (rn *runner) safetyMonolock(o safety.Options) {
	root, _ := filepath.Abs("..")
	specs, specErr := driverSpecs(root, rn.work)
	for _, name := range rn.safetyClientNames {
		label := "monolock " + name
		fail := func(msg string) {
			log.Printf("safety     %-26s: %s", label, msg)
			for _, f := range o.Faults {
				rn.r.Safety = append(rn.r.Safety, report.SafetyCell{System: label, Monolock: true, Signal: safetySignals[name], Fault: f, Err: msg})
			}
		}
		mono, err := rn.startMonolock()
		if err != nil {
			fail("server did not start: " + err.Error())
			continue
		}
		if name == "go-polled" {
			rn.safetyRecipe(safety.GoPolled(mono.Addr, o.Lease), true, o)
			mono.Stop()
			continue
		}
		spec, ok := specs[name]
		if !ok {
			msg := "no driver in conformance/manifest.json at the time of this run"
			if specErr != nil {
				msg += ": " + specErr.Error()
			}
			fail(msg)
			mono.Stop()
			continue
		}
		if err := rn.buildDriver(root, spec); err != nil {
			fail("driver build failed: " + err.Error())
			mono.Stop()
			continue
		}
		d, err := drivers.Start(rn.ctx, root, spec)
		if err != nil {
			fail("driver did not start: " + err.Error())
			mono.Stop()
			continue
		}
		addr := mono.Addr
		rn.safetyRecipe(safety.Recipe{
			Name:     label,
			Signal:   safetySignals[name],
			Upstream: addr,
			New:      func(lock string) safety.Trial { return d.NewSafetyTrial(addr, lock, o.Lease) },
		}, true, o)
		d.Close()
		mono.Stop()
		if rn.ctx.Err() != nil {
			return
		}
	}
}

// buildDriver builds spec once per run (workload 5 shares the cache).
func (rn *runner) buildDriver(root string, spec conformance.Client) error {
	if rn.built == nil {
		rn.built = map[string]error{}
	}
	key := spec.Dir + " " + strings.Join(spec.Build, " ")
	if err, done := rn.built[key]; done {
		return err
	}
	ctx, cancel := context.WithTimeout(rn.ctx, 10*time.Minute)
	defer cancel()
	err := conformance.BuildClient(ctx, root, spec)
	if err != nil {
		// The error ends with the build's output: all of it to the log, its
		// first line to the report.
		log.Print(err)
		first, _, _ := strings.Cut(err.Error(), "\n")
		err = errors.New(first)
	}
	rn.built[key] = err
	return err
}

// safetyRecipe measures one recipe under every fault and records its cells.
func (rn *runner) safetyRecipe(rec safety.Recipe, mono bool, o safety.Options) {
	t0 := time.Now()
	cells := safety.Measure(rn.ctx, rec, o)
	for _, c := range cells {
		s := safety.Summarise(c.Runs)
		rn.r.Safety = append(rn.r.Safety, report.SafetyCell{System: rec.Name, Monolock: mono, Signal: rec.Signal, Fault: c.Fault, Runs: c.Runs, Summary: s})
		line := fmt.Sprintf("min %v median %v max %v", s.Min.Round(time.Millisecond), s.Median.Round(time.Millisecond), s.Max.Round(time.Millisecond))
		if s.Measured == 0 {
			line = "no margin measured"
		}
		log.Printf("safety     %-26s %-15s: %s  unsafe %d/%d  not told %d  no grant %d  failed %d %s",
			rec.Name, c.Fault, line, s.Unsafe, s.Runs, s.NotTold, s.NoGrant, s.Failed, oneLineErr(s.FirstErr))
	}
	log.Printf("safety     %-26s done in %v", rec.Name, time.Since(t0).Round(time.Second))
}

// peerLibraries are the versions of the peers' client libraries built
// into this binary.
func peerLibraries() map[string]string {
	out := map[string]string{}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return out
	}
	for _, m := range bi.Deps {
		switch m.Path {
		case "github.com/go-redsync/redsync/v4", "github.com/redis/go-redis/v9", "go.etcd.io/etcd/client/v3", "github.com/go-zookeeper/zk", "github.com/jackc/pgx/v5":
			out[m.Path] = m.Version
		}
	}
	return out
}

func oneLineErr(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}
