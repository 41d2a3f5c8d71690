//go:build unix

package runcmd

import (
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/monolock/monolock/go/internal/proctree"
)

// stopPhase is where the stop of a lost lock's command stands.
type stopPhase int

const (
	stopTerm    stopPhase = iota // SIGTERM sent: the command may end on its own until the kill instant
	stopKill                     // SIGKILL sent, and sent again to whatever shows up, until all are reaped
	stopReaped                   // every process is dead and reaped: the lock may go
	stopOverdue                  // the lease ended first: what is left is reported
)

func (p stopPhase) String() string {
	return [...]string{"term", "kill", "reaped", "overdue"}[p]
}

// stopPlan is when the stop escalates, on the monotonic clock.
type stopPlan struct {
	kill     time.Time // SIGKILL to every process left
	leaseEnd time.Time // from here on the server may grant the lock to someone else
	giveUp   time.Time // stop waiting and report what is left
	kicked   bool      // an administrator's kick: the lock has passed on already
}

// planStop plans the stop of a loss noticed at now: SIGKILL after grace,
// but never later than killAllowance plus the work gap before the lease
// end, so that the kill has finished a work gap before the server can
// grant the lock again. A loss noticed too late for that (monolock run
// itself was stopped, or starved of CPU) kills at once, and still gives the
// kill its allowance to finish.
func planStop(now, leaseEnd time.Time, grace, gap time.Duration) stopPlan {
	kill := now.Add(grace)
	if latest := leaseEnd.Add(-killAllowance - gap); kill.After(latest) {
		kill = latest
	}
	if kill.Before(now) {
		kill = now
	}
	giveUp := leaseEnd
	if floor := kill.Add(killAllowance); giveUp.Before(floor) {
		giveUp = floor
	}
	return stopPlan{kill: kill, leaseEnd: leaseEnd, giveUp: giveUp}
}

// How often the stop looks again besides each reaping. While a kill is
// finishing, often: a process forked just before its parent's SIGKILL is
// seen only after that parent is gone. Otherwise seldom: before the kill
// the reapings say when to look (the tick only polls the process group on
// systems without a subreaper), what is left a kill allowance after SIGKILL
// is stuck, and each look reads /proc.
const (
	fastSweep = 5 * time.Millisecond
	slowSweep = 100 * time.Millisecond
)

// stopReport is the outcome of a stop, for the exit report.
type stopReport struct {
	phase     stopPhase       // stopReaped or stopOverdue
	processes int             // every process that got a signal
	killed    int             // those that got SIGKILL
	left      []proctree.Proc // alive when the wait ended (stopOverdue)
	margin    time.Duration   // from the last reaping to the lease end (stopReaped)
	kicked    bool            // the lock passed on at the loss: there is no margin
}

// stopper stops the command and everything it started.
type stopper struct {
	c       *child
	plan    stopPlan
	sigs    <-chan os.Signal
	phase   stopPhase
	seen    map[proctree.ID]bool // every process signalled; true once it got SIGKILL
	allGone <-chan struct{}      // c.allGone until seen closed, then nil
}

func newStopper(c *child, plan stopPlan, sigs <-chan os.Signal) *stopper {
	return &stopper{c: c, plan: plan, sigs: sigs, seen: map[proctree.ID]bool{}, allGone: c.allGone}
}

// run sends SIGTERM and waits until every process is reaped, with SIGKILL
// at the planned instant, or until the plan gives up.
func (s *stopper) run() stopReport {
	if s.plan.kill.After(time.Now()) {
		s.signalAll(syscall.SIGTERM)
	} else {
		// No time for SIGTERM to act: a stopped tree (Ctrl-Z) is not
		// continued to run past the lease for it.
		s.phase = stopKill
		s.signalAll(syscall.SIGKILL)
	}
	killAt := time.NewTimer(time.Until(s.plan.kill))
	defer killAt.Stop()
	giveUp := time.NewTimer(time.Until(s.plan.giveUp))
	defer giveUp.Stop()
	tick := time.NewTicker(s.sweepInterval(time.Now()))
	defer tick.Stop()
	for s.phase == stopTerm || s.phase == stopKill {
		select {
		case <-s.allGone:
			s.allGone = nil // closed for good: see it once
			s.check()
		case <-s.c.reaped:
			s.check()
		case <-tick.C:
			s.check()
			tick.Reset(s.sweepInterval(time.Now()))
		case <-killAt.C:
			if s.phase == stopTerm {
				s.phase = stopKill
				s.signalAll(syscall.SIGKILL)
				tick.Reset(fastSweep)
			}
		case <-giveUp.C:
			s.check()
			if s.phase != stopReaped {
				s.phase = stopOverdue
			}
		case sig := <-s.sigs:
			s.c.signalGroup(sig.(syscall.Signal))
		}
	}
	return s.report()
}

// sweepInterval is the tick of the stop at now: fast only while a kill is
// finishing.
func (s *stopper) sweepInterval(now time.Time) time.Duration {
	if s.phase == stopKill && now.Before(s.plan.kill.Add(killAllowance)) {
		return fastSweep
	}
	return slowSweep
}

// check ends the stop once everything is reaped; in the kill phase it
// sends SIGKILL to whatever has turned up since the last look.
func (s *stopper) check() {
	if s.gone() {
		s.phase = stopReaped
		return
	}
	if s.phase == stopKill {
		s.signalAll(syscall.SIGKILL)
	}
}

// gone reports whether every process the command started is dead and
// reaped: monolock run has no child left (as a subreaper it inherits every
// orphan below it) and the command's process group is empty (which covers
// systems without a subreaper).
func (s *stopper) gone() bool {
	if !closed(s.c.allGone) {
		return false
	}
	s.c.signalGroup(0) // signal 0 only checks that the group exists
	return s.c.group.Gone()
}

// signalAll sends sig to the command's process group and to every process
// below monolock run, in or out of that group. A stopped process must run
// to act on SIGTERM, so it is continued too. The look comes first, so that
// the count of what needed SIGKILL includes the group that SIGKILL fells
// in one call.
func (s *stopper) signalAll(sig syscall.Signal) {
	procs := s.c.descendants()
	s.c.signalGroup(sig)
	if sig != syscall.SIGKILL {
		s.c.signalGroup(syscall.SIGCONT)
	}
	for _, p := range procs {
		s.seen[p.ID()] = s.seen[p.ID()] || sig == syscall.SIGKILL
		if proctree.Signal(p, sig) && sig != syscall.SIGKILL {
			proctree.Signal(p, syscall.SIGCONT)
		}
	}
}

// closed reports whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (s *stopper) report() stopReport {
	r := stopReport{phase: s.phase, processes: len(s.seen), kicked: s.plan.kicked}
	for _, killed := range s.seen {
		if killed {
			r.killed++
		}
	}
	if s.phase == stopReaped {
		r.margin = time.Until(s.plan.leaseEnd)
		return r
	}
	r.left = s.c.descendants()
	return r
}

// reportStop tells the outcome of a stop on stderr: every process that
// outlived the lease with its pid and state, then one summary line.
func (r *runner) reportStop(rep stopReport) {
	for _, p := range rep.left {
		r.log.Error(fmt.Sprintf("pid %d (%s) is still alive, in state %s, when the lock can pass on; only the fencing token protects against it now", p.Pid, p.Comm, p.StateName()),
			"pid", p.Pid, "state", string(p.State))
	}
	attrs := []any{"outcome", rep.phase.String(), "processes", rep.processes, "killed", rep.killed, "left", len(rep.left)}
	switch {
	case rep.phase == stopReaped && rep.kicked:
		r.log.Warn(fmt.Sprintf("command stopped: %d processes dead and reaped (%d needed SIGKILL), after the kick had passed the lock on",
			rep.processes, rep.killed), attrs...)
	case rep.phase == stopReaped:
		r.log.Warn(fmt.Sprintf("command stopped: %d processes dead and reaped (%d needed SIGKILL), %v before the lock can pass on",
			rep.processes, rep.killed, rep.margin.Round(time.Millisecond)), append(attrs, "margin", rep.margin.String())...)
	default:
		r.log.Error(fmt.Sprintf("command not fully stopped: %d of %d processes still alive when the lock can pass on (%d got SIGKILL)",
			len(rep.left), rep.processes, rep.killed), attrs...)
	}
}
