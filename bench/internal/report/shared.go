package report

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/monolock/monolock/bench/internal/systems"
)

// writeShared prints workload 9: shared locks beside PostgreSQL's shared
// advisory locks, the readers/writer handoff, and a semaphore.
func writeShared(b *bytes.Buffer, r *Results) {
	s := r.Shared
	if s == nil || len(s.Throughput)+len(s.RW)+len(s.Semaphore) == 0 {
		return
	}
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## 9. Shared locks and semaphores\n\n")
	p("monolock's shared claims (protocol version 2, [protocol.md](protocol.md)) through the Go client's `client.Shared()` and `client.Limit(n)`, beside PostgreSQL's shared advisory locks: `pg_advisory_lock_shared` / `pg_advisory_unlock_shared` for a reader, `pg_advisory_lock` / `pg_advisory_unlock` for a writer, on one pooled connection per worker as in the sections above. ")
	p("Redis, etcd and ZooKeeper have no shared lock in the recipes measured here and are not in this section.\n\n")
	writeSeparateRun(b, s.SeparateRun)

	if len(s.Throughput) > 0 {
		p("### Shared-lock throughput\n\n")
		p("Every worker loops acquire shared → release on the one name all of them share, for a fixed time; latency is one full cycle. No claim ever waits (nobody asks for the name exclusively), so this is the cost of a shared claim, and of many of them on one name at once. (That the claims really hold together is shown by the handoff below, whose readers all hold before its writer asks.)\n\n")
		p("| system | workers | cycles/s | p50 | p99 | monolock ÷ system (cycles/s) | errors |\n|---|---:|---:|---:|---:|---:|---:|\n")
		for _, w := range modeWorkerCounts(s.Throughput) {
			mono, _ := findMode(s.Throughput, systems.Monolock, w)
			for _, c := range s.Throughput {
				if c.Workers != w {
					continue
				}
				if c.Err != "" && c.Result.Cycles.Count == 0 {
					p("| %s | %d | failed: %s | | | | |\n", c.System, w, oneLine(c.Err))
					continue
				}
				rt := ratio(mono.Result.Cycles.PerSec, c.Result.Cycles.PerSec)
				if c.System == systems.Monolock {
					rt = ""
				}
				x := c.Result.Cycles
				p("| %s | %d | %s | %s | %s | %s | %d |\n", c.System, w, num(x.PerSec), dur(x.P50), dur(x.P99), rt, x.Errors)
			}
		}
		p("\n")
	}

	if len(s.RW) > 0 {
		settle := s.RW[0].Result.Settle
		p("### Readers/writer handoff\n\n")
		p("In each phase R readers take the name shared (all at once), a writer then asks for it exclusively and is given %s to queue behind them, and the readers release one after another; the figure is the time from the **last reader's release call to the writer's grant**. ", dur(settle))
		p("The writer releases and the next phase begins, so phases/s counts whole phases, the readers' acquisitions and the %s included. ", dur(settle))
		p("A grant to the writer while a reader still held (a worker counts itself a holder from its grant until it calls release) would fail the run.\n\n")
		p("| system | readers | phases/s | handoff p50 | handoff p99 | handoff max | system ÷ monolock (handoff p50) | writer beside a reader | errors |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, n := range rwReaderCounts(s.RW) {
			var mono RWCell
			for _, c := range s.RW {
				if c.Result.Readers == n && c.System == systems.Monolock {
					mono = c
				}
			}
			for _, c := range s.RW {
				if c.Result.Readers != n {
					continue
				}
				if c.Err != "" && c.Result.Handoff.Count == 0 {
					p("| %s | %d | failed: %s | | | | | | |\n", c.System, n, oneLine(c.Err))
					continue
				}
				rt := ratio(float64(c.Result.Handoff.P50), float64(mono.Result.Handoff.P50))
				if c.System == systems.Monolock {
					rt = ""
				}
				h := c.Result.Handoff
				p("| %s | %d | %s | %s | %s | %s | %s | %d | %d |\n", c.System, n, num(h.PerSec), dur(h.P50), dur(h.P99), dur(h.Max), rt, c.Result.Overlaps, h.Errors)
			}
		}
		p("\n")
	}

	if len(s.Semaphore) > 0 {
		p("### Semaphore\n\n")
		p("Every worker loops acquire → hold %s → release on one name as a semaphore of %d permits (`client.Limit(%d)`). ", dur(s.Hold), s.Semaphore[0].Result.Limit, s.Semaphore[0].Result.Limit)
		p("Each worker counts itself a holder from its grant until it calls release; *most holders at once* is the highest count, and a count above the limit fails the run. ")
		p("PostgreSQL has no semaphore (no advisory lock takes a bound on its shared holders), so it has no row here; the usual substitute, `pg_try_advisory_lock` over N keys with polling, is a different recipe and is not measured.\n\n")
		p("| system | workers | permits | cycles/s | p50 | p99 | most holders at once | verdict | errors |\n|---|---:|---:|---:|---:|---:|---:|---|---:|\n")
		for _, c := range s.Semaphore {
			if c.Err != "" && c.Result.Cycles.Count == 0 {
				p("| %s | %d | %d | failed: %s | | | | | |\n", c.System, c.Workers, c.Result.Limit, oneLine(c.Err))
				continue
			}
			x := c.Result.Cycles
			v := "never above the limit"
			if c.Result.Over() {
				v = "**above the limit**"
			}
			p("| %s | %d | %d | %s | %s | %s | %d | %s | %d |\n", c.System, c.Workers, c.Result.Limit, num(x.PerSec), dur(x.P50), dur(x.P99), c.Result.MaxHolders, v, x.Errors)
		}
		p("\n")
	}
}

func modeWorkerCounts(cs []ModeCell) []int {
	var ns []int
	for _, c := range cs {
		if !slices.Contains(ns, c.Workers) {
			ns = append(ns, c.Workers)
		}
	}
	slices.Sort(ns)
	return ns
}

func rwReaderCounts(cs []RWCell) []int {
	var ns []int
	for _, c := range cs {
		if !slices.Contains(ns, c.Result.Readers) {
			ns = append(ns, c.Result.Readers)
		}
	}
	slices.Sort(ns)
	return ns
}

func findMode(cs []ModeCell, sys string, workers int) (ModeCell, bool) {
	for _, c := range cs {
		if c.System == sys && c.Workers == workers {
			return c, true
		}
	}
	return ModeCell{}, false
}

// MergeShared puts the parts of workload 9 that next measured into old,
// keeping the parts it did not run, and marks the section as measured
// separately, described by next's run.
func MergeShared(old *SharedSection, next *SharedSection) *SharedSection {
	if next == nil {
		return old
	}
	out := *next
	if old != nil {
		if len(out.Throughput) == 0 {
			out.Throughput = old.Throughput
		}
		if len(out.RW) == 0 {
			out.RW = old.RW
		}
		if len(out.Semaphore) == 0 {
			out.Semaphore, out.Hold = old.Semaphore, old.Hold
		}
	}
	out.Separate = true
	return &out
}
