package report

import (
	"bytes"
	"fmt"
	"slices"
	"time"
)

// writeFailover prints workload 7.
func writeFailover(b *bytes.Buffer, r *Results) {
	f := r.Failover
	if f == nil {
		return
	}
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## 7. Failover\n\n")
	p("An HA cell ([ha.md](ha.md)) of three `monolock serve` on a three-member etcd cluster, all on this machine, with `--etcd-ttl %s` and %s leases. ", round(f.TTL), round(f.Lease))
	p("In each run a Go client holds a lock on the active server and a second one waits for it (each given all three addresses); the active server is killed with `kill -9`, and the figure is the time from the kill to the waiter's grant by the server that took over. ")
	p("That is etcd's own handover of the election (the old leader's key must expire: up to one TTL) plus the wait the new leader holds the lock back for (the longest lease up to 10 s the old one acknowledged, or the lock's own longer lease, so that every holder it told anything has been told of its loss), plus the client's retry. ")
	if f.LongLease > 0 {
		p("In the runs *beside a %s lease*, a third client also holds another lock on a %s lease when the server is killed: that lock waits its own lease after the failover, the first lock does not (a new leader once waited the longest lease for every lock). ", round(f.LongLease), round(f.LongLease))
	}
	p("Beside it, on the same etcd cluster: etcd's raft leader election after a `kill -9` of its leader member (the time until a member names a new leader), and etcd's election recipe (`concurrency.Election`, on which the cell's leadership rests) handing over after its leader's process vanishes without revoking its lease, with the same TTL.\n\n")
	if f.Separate {
		p("*Measured in a run of its own (`-workloads failover`), merged into the run above.*\n\n")
	}
	if f.Err != "" {
		p("Not measured: %s\n\n", oneLine(f.Err))
		return
	}
	p("| what | runs | min | median | max |\n|---|---:|---:|---:|---:|\n")
	row := func(name string, xs []float64) {
		if len(xs) == 0 {
			p("| %s | 0 | – | – | – |\n", name)
			return
		}
		s := slices.Clone(xs)
		slices.Sort(s)
		sec := func(x float64) string { return round(time.Duration(x * float64(time.Second))) }
		p("| %s | %d | %s | %s | %s |\n", name, len(s), sec(s[0]), sec(s[len(s)/2]), sec(s[len(s)-1]))
	}
	row("monolock HA: kill -9 of the active server → the waiter's grant", f.Monolock)
	if f.LongLease > 0 {
		row(fmt.Sprintf("the same, beside a lock on a %s lease", round(f.LongLease)), f.BesideLong)
	}
	row("etcd: kill -9 of the raft leader → a new leader", f.Raft)
	row(fmt.Sprintf("etcd election recipe (TTL %s): the leader vanishes → the next campaigner elected", round(f.TTL)), f.Recipe)
	p("\n")
}
