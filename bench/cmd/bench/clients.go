package main

import (
	"log"
	"path/filepath"
	"time"

	"github.com/monolock/monolock/bench/internal/drivers"
	"github.com/monolock/monolock/bench/internal/report"
)

// clientWarmup is how long each client's driver runs unmeasured cycles
// before workload 5 measures it.
const clientWarmup = 2 * time.Second

// wantedClients are the clients workload 5 asks for, in report order.
var wantedClients = []string{"go", "python-sync", "python-asyncio", "node", "rust-blocking", "rust-tokio"}

func (rn *runner) runClients() error {
	root, _ := filepath.Abs("..")
	specs, err := driverSpecs(root, rn.work)
	if err != nil {
		log.Printf("clients: %v", err)
	}
	mono, err := rn.startMonolock()
	if err != nil {
		return err
	}
	defer mono.Stop()
	for _, name := range rn.clients {
		spec, ok := specs[name]
		fail := func(msg string) {
			for _, w := range []struct {
				wl string
				n  int
			}{{"uncontended", 1}, {"uncontended", 16}, {"handoff", 16}} {
				rn.r.Clients = append(rn.r.Clients, report.ClientCell{Client: name, Workload: w.wl, Workers: w.n, Err: msg})
			}
			log.Printf("clients    %-14s: %s", name, msg)
		}
		if !ok {
			fail("no driver in conformance/manifest.json at the time of this run")
			continue
		}
		if err := rn.buildDriver(root, spec); err != nil {
			fail("driver build failed: " + err.Error())
			continue
		}
		d, err := drivers.Start(rn.ctx, root, spec)
		if err != nil {
			fail("driver did not start: " + err.Error())
			continue
		}
		// Unmeasured: a fresh driver's first cycles pay for its runtime's
		// warm-up (V8's and the JVM's compilers), which a long-lived
		// application pays once.
		_, _ = drivers.Uncontended(rn.ctx, d, mono.Addr, 1, clientWarmup)
		rn.r.ClientWarmup = clientWarmup
		for _, n := range []int{1, 16} {
			c := report.ClientCell{Client: name, Workload: "uncontended", Workers: n}
			c.Stats, err = drivers.Uncontended(rn.ctx, d, mono.Addr, n, rn.plan.clientFor)
			if err != nil {
				c.Err = err.Error()
			}
			log.Printf("clients    %-14s uncontended %2d: %7.0f cycles/s  p50 %v  p99 %v  errors %d %s", name, n, c.Stats.PerSec, c.Stats.P50, c.Stats.P99, c.Stats.Errors, c.Err)
			rn.r.Clients = append(rn.r.Clients, c)
		}
		c := report.ClientCell{Client: name, Workload: "handoff", Workers: 16}
		c.Stats, err = drivers.Handoff(rn.ctx, d, mono.Addr, 16, rn.plan.clientFor)
		if err != nil {
			c.Err = err.Error()
		}
		log.Printf("clients    %-14s handoff     16: %7.0f handoffs/s  p50 %v  p99 %v  errors %d %s", name, c.Stats.PerSec, c.Stats.P50, c.Stats.P99, c.Stats.Errors, c.Err)
		rn.r.Clients = append(rn.r.Clients, c)
		d.Close()
		if rn.ctx.Err() != nil {
			return rn.ctx.Err()
		}
	}
	return nil
}
