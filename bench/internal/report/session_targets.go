package report

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/monolock/monolock/bench/internal/systems"
)

// sessionTargets are the targets of sessions (protocol version 4): the
// uncontended cycles/s of monolock-session against a peer's at one worker
// count.
var sessionTargets = []struct {
	peer    string
	workers int
}{
	{systems.Redis, 16},
	{systems.Postgres, 1},
}

// writeSessionTargets prints the session targets that this run measured.
func writeSessionTargets(b *bytes.Buffer, r *Results) {
	if !slices.ContainsFunc(r.Throughput, func(c ThroughputCell) bool { return c.System == systems.MonolockSession }) {
		return
	}
	for _, t := range sessionTargets {
		if !slices.ContainsFunc(r.Throughput, func(c ThroughputCell) bool { return c.System == t.peer && c.Workers == t.workers }) {
			continue // not in this run
		}
		m := findThroughput(r, systems.MonolockSession, t.workers).Stats.PerSec
		o := findThroughput(r, t.peer, t.workers).Stats.PerSec
		fmt.Fprintf(b, "| with a session, uncontended cycles/s at %s ≥ %s's | monolock-session %s, %s %s (%s) | %s |\n",
			workersLabel(t.workers), t.peer, num(m), t.peer, num(o), ratio(m, o), verdict(m > 0 && o > 0 && m >= o))
	}
}
