package main

import (
	"log"
	"slices"
	"time"

	"github.com/monolock/monolock/bench/internal/election"
	"github.com/monolock/monolock/bench/internal/peerelection"
	"github.com/monolock/monolock/bench/internal/report"
	"github.com/monolock/monolock/bench/internal/systems"
)

// electionOptions is workload 10's measurement, for the plan.
func (rn *runner) electionOptions() election.Options {
	p := rn.plan
	return election.Options{Lease: p.electionLease, Runs: p.electionRuns, Parallel: p.electionParallel,
		Followers: p.electionFollowers, Proclaims: p.electionProclaims, Rounds: p.electionRounds, Pace: p.electionPace,
		Log: log.Printf}
}

// election measures workload 10: monolock's leader election beside etcd's
// concurrency.Election, each system its own runs, taking turns.
func (rn *runner) election() error {
	o := rn.electionOptions()
	start := time.Now()
	sec := &report.ElectionSection{Lease: o.Lease, Runs: o.Runs, Parallel: o.Parallel, Followers: o.Followers,
		Proclaims: o.Proclaims, Pace: o.Pace, Libraries: peerLibraries(),
		SeparateRun: report.SeparateRun{Started: start, Command: commandLine(), LoadStart: loadavg()}}
	rn.r.Election = sec
	defer func() {
		sec.Duration = time.Since(start)
		sec.LoadEnd = loadavg()
	}()
	var recs []election.Recipe
	if slices.Contains(rn.systems, systems.Monolock) {
		mono, err := rn.startMonolock()
		if err != nil {
			sec.Err = "monolock serve did not start: " + err.Error()
			log.Printf("election   %s", sec.Err)
			return nil
		}
		defer mono.Stop()
		recs = append(recs, election.Monolock(mono.Addr, o.Lease))
	}
	if slices.Contains(rn.systems, systems.Etcd) {
		recs = append(recs, peerelection.Etcd(o.Lease))
	}
	if len(recs) == 0 {
		return nil
	}
	sec.Systems = election.Measure(rn.ctx, recs, o)
	log.Printf("election   done in %v", time.Since(start).Round(time.Second))
	return rn.ctx.Err()
}
