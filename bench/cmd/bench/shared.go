package main

import (
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/monolock/monolock/bench/internal/report"
	"github.com/monolock/monolock/bench/internal/systems"
	"github.com/monolock/monolock/bench/internal/workload"
)

// sharedWorkloads are the parts of workload 9, run alone or together; run
// without the others, they are merged into the last run's results.
var sharedWorkloads = []string{"shared", "rwhandoff", "semaphore"}

// sharedSystems are the systems of workload 9: monolock and PostgreSQL,
// the one peer with a shared lock.
func (rn *runner) sharedSystems() []string {
	var out []string
	for _, s := range rn.systems {
		if s == systems.Monolock || s == systems.Postgres {
			out = append(out, s)
		}
	}
	return out
}

func (rn *runner) sharedSection() *report.SharedSection {
	if rn.r.Shared == nil {
		rn.r.Shared = &report.SharedSection{}
	}
	return rn.r.Shared
}

// sharedThroughput is workload 9's shared-lock cycles on one name.
func (rn *runner) sharedThroughput() error {
	sec := rn.sharedSection()
	for _, w := range rn.plan.sharedWorkers {
		for _, name := range rn.sharedSystems() {
			cell := report.ModeCell{System: name, Workers: w}
			err := rn.withSystem(name, systems.Options{Lease: 10 * time.Second, Pool: w}, func(sys systems.System, _ *localServer) error {
				var err error
				cell.Result, err = workload.ModeCycles(rn.ctx, sys, w, rn.plan.sharedFor, 0, fmt.Sprintf("shared-%d", time.Now().UnixNano()), systems.Mode{Shared: true})
				return err
			})
			if err != nil {
				cell.Err = err.Error()
			}
			x := cell.Result.Cycles
			log.Printf("shared     %-9s %2d workers: %8.0f cycles/s  p50 %v  p99 %v  most holders %d  errors %d %s",
				name, w, x.PerSec, x.P50, x.P99, cell.Result.MaxHolders, x.Errors, cell.Err)
			sec.Throughput = append(sec.Throughput, cell)
		}
	}
	return rn.ctx.Err()
}

// rwHandoff is workload 9's readers/writer handoff.
func (rn *runner) rwHandoff() error {
	sec := rn.sharedSection()
	for _, readers := range rn.plan.rwReaders {
		for _, name := range rn.sharedSystems() {
			cell := report.RWCell{System: name}
			err := rn.withSystem(name, systems.Options{Lease: 10 * time.Second, Pool: readers + 1}, func(sys systems.System, _ *localServer) error {
				var err error
				cell.Result, err = workload.RWHandoff(rn.ctx, sys, readers, rn.plan.sharedFor, rn.plan.rwSettle, fmt.Sprintf("rw-%d", time.Now().UnixNano()))
				return err
			})
			if err != nil {
				cell.Err = err.Error()
			}
			h := cell.Result.Handoff
			log.Printf("rwhandoff  %-9s %2d readers: %6.0f phases/s  handoff p50 %v  p99 %v  max %v  writer beside a reader %d  errors %d %s",
				name, readers, h.PerSec, h.P50, h.P99, h.Max, cell.Result.Overlaps, h.Errors, cell.Err)
			sec.RW = append(sec.RW, cell)
			if errors.Is(err, workload.ErrOverLimit) {
				return err
			}
		}
	}
	return rn.ctx.Err()
}

// semaphore is workload 9's semaphore: monolock only, since PostgreSQL has
// no bounded shared lock. Failing the check fails the run.
func (rn *runner) semaphore() error {
	sec := rn.sharedSection()
	sec.Hold = rn.plan.semHold
	for _, name := range rn.sharedSystems() {
		if name != systems.Monolock {
			log.Printf("semaphore  %-9s: no semaphore, not measured", name)
			continue
		}
		w := rn.plan.semWorkers
		cell := report.ModeCell{System: name, Workers: w}
		err := rn.withSystem(name, systems.Options{Lease: 10 * time.Second, Pool: w}, func(sys systems.System, _ *localServer) error {
			var err error
			cell.Result, err = workload.ModeCycles(rn.ctx, sys, w, rn.plan.sharedFor, rn.plan.semHold, fmt.Sprintf("sem-%d", time.Now().UnixNano()), systems.Mode{Shared: true, Limit: rn.plan.semLimit})
			return err
		})
		if err != nil {
			cell.Err = err.Error()
		}
		x := cell.Result.Cycles
		log.Printf("semaphore  %-9s %2d workers, %d permits: %8.0f cycles/s  p50 %v  p99 %v  most holders %d  errors %d %s",
			name, w, rn.plan.semLimit, x.PerSec, x.P50, x.P99, cell.Result.MaxHolders, x.Errors, cell.Err)
		sec.Semaphore = append(sec.Semaphore, cell)
		if errors.Is(err, workload.ErrOverLimit) {
			return err
		}
	}
	return rn.ctx.Err()
}
