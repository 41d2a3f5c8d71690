//go:build unix

package runcmd

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/monolock/monolock/go/client"
	"github.com/monolock/monolock/go/internal/proctree"
	"github.com/monolock/monolock/go/internal/runcmd/watchdog"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// forwarded are the signals passed on to the command's process group.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// child is the running command, below its watchdog. Its process group has
// its pid as id.
type child struct {
	pid      int             // the command
	group    *proctree.Group // its process group
	watchdog int             // its parent, the watchdog process (0: none, in tests)
	stopped  chan struct{}   // a stop (SIGTSTP, SIGTTIN, SIGSTOP...) of the command
	done     chan struct{}   // closed once the command has ended and status is set
	ended    sync.Once
	status   unix.WaitStatus
	reaped   chan struct{} // a process below monolock run was reaped (one pending is enough)
	allGone  chan struct{} // closed when monolock run has no child left, the command included
	told     chan struct{} // closed when the watchdog's events have ended (closed already without one)
	// killing: the watchdog began to kill the tree (its deadline passed);
	// killedBy: how that kill ended, once told.
	killing  atomic.Bool
	killedBy atomic.Pointer[watchdog.Event]
	// treeStopped: monolock run has stopped the command's tree for a job
	// stop (Ctrl-Z) and not continued it yet.
	treeStopped bool
}

func newChild(pid int) *child {
	told := make(chan struct{})
	close(told)
	return &child{
		pid:     pid,
		group:   proctree.NewGroup(pid),
		stopped: make(chan struct{}, 1),
		done:    make(chan struct{}),
		reaped:  make(chan struct{}, 1),
		allGone: make(chan struct{}),
		told:    told,
	}
}

// watched returns the child of a running watchdog, following its events.
func watched(wd *watchdog.Watchdog) *child {
	c := newChild(wd.Command)
	c.watchdog = wd.Pid
	c.told = make(chan struct{})
	go c.follow(wd.Events)
	return c
}

// follow takes in what the watchdog tells of the command.
func (c *child) follow(events <-chan watchdog.Event) {
	defer close(c.told)
	for ev := range events {
		switch ev.Kind {
		case watchdog.Stopped:
			notify(c.stopped)
		case watchdog.Exited:
			c.exit(ev.Wait)
		case watchdog.Killing:
			c.killing.Store(true)
		case watchdog.Killed:
			c.killedBy.Store(&ev)
		}
	}
}

// exit records the command's end, once.
func (c *child) exit(ws unix.WaitStatus) {
	c.ended.Do(func() {
		c.status = ws
		close(c.done)
	})
}

// reap waits for every child of monolock run: the watchdog, and,
// monolock run being a subreaper, whatever is re-parented to it should the
// watchdog die (the command among them, whose stops it then tells; Wait4
// with WUNTRACED is the one wait that sees both, so exec.Cmd.Wait is not
// used), so none stays a zombie. It returns at ECHILD: nothing is left
// below monolock run, and as nothing but the watchdog was started, nothing
// can appear there any more.
func (c *child) reap() {
	defer close(c.allGone)
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WUNTRACED, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			// ECHILD. The watchdog has gone, and told all it had to
			// tell before: the command's end is known unless the
			// command, impossibly, was never reaped.
			<-c.told
			c.exit(0)
			return
		case ws.Stopped():
			if pid == c.pid {
				notify(c.stopped)
			}
			// A stopped orphan is continued by the stop after a loss.
			continue
		case pid == c.pid:
			c.exit(ws)
		}
		notify(c.reaped)
	}
}

// signalGroup sends sig to the command's process group while it exists.
func (c *child) signalGroup(sig syscall.Signal) {
	c.group.Signal(sig, closed(c.done))
}

// signalTree sends sig to the command's process group and to every
// process below monolock run but the watchdog.
func (c *child) signalTree(sig syscall.Signal) {
	c.signalGroup(sig)
	for _, p := range c.descendants() {
		proctree.Signal(p, sig)
	}
}

// descendants are the processes of the command: every live process below
// monolock run but the watchdog.
func (c *child) descendants() []proctree.Proc {
	ps := proctree.Descendants(os.Getpid())
	return slices.DeleteFunc(ps, func(p proctree.Proc) bool { return p.Pid == c.watchdog || p.State == 'Z' })
}

// notify wakes the reader of ch unless a wake-up is pending already.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// supervise runs the command under the lock and returns the exit status.
func (r *runner) supervise(lock *client.Lock, sigs <-chan os.Signal) int {
	if err := lock.Err(); err != nil {
		r.fail("lock lost before the command started", err)
		return ExitLockLost
	}
	// Before the start: an orphan reparented before the call would be
	// lost. The watchdog is the command's subreaper; monolock run is one
	// too, for what the watchdog leaves should it die.
	if err := proctree.BecomeSubreaper(); err != nil {
		r.log.Warn("processes that leave the command's process group will not be stopped after a loss", "err", err)
	}
	// From the command's start on, monolock run stops only together with
	// the command's whole tree (job.stop): Ctrl-Z and SIGTTIN are caught
	// before the start, so that one that comes as the command starts
	// stops it too rather than monolock run alone. (A caught signal is
	// not inherited: the command starts with the default actions.)
	jobStops := make(chan os.Signal, 1)
	signal.Notify(jobStops, syscall.SIGTSTP, syscall.SIGTTIN)
	defer signal.Stop(jobStops)
	continued := make(chan os.Signal, 1)
	signal.Notify(continued, syscall.SIGCONT)
	defer signal.Stop(continued)
	wd, status := r.startWatchdog(lock)
	if wd == nil {
		return status
	}
	defer wd.Close()
	c := watched(wd)
	go c.reap()

	// SIGTTOU, which a write to the terminal from the background or
	// taking the terminal back would raise, is ignored only now: an
	// ignored signal is inherited, and the watchdog, and so the command,
	// must not start with it ignored.
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	term := controllingTerminal()
	if term != nil {
		defer func() { term.move(c.pid, ownGroup()) }()
	}
	j := &job{c: c, term: term, lock: lock, continued: continued}

	// The watchdog's deadline follows the lease end as heartbeats move it.
	killAt := r.killAt(lock)
	follow := time.NewTicker(workGap(r.o.lease))
	defer follow.Stop()
	for {
		select {
		case <-c.done:
			if c.killing.Load() && lock.Err() == nil {
				r.log.Error("the watchdog killed the command at its deadline: monolock run could not run to move it on, though the lock holds")
			}
			if err := lock.Err(); err != nil && !errors.Is(err, client.ErrReleased) {
				// Lost before the command finished: its work was not
				// fully protected, whatever its own status says, and
				// what it left behind is stopped as for any loss.
				r.fail("lock lost", err)
				r.stopAfterLoss(lock, c, sigs)
				return ExitLockLost
			}
			wd.Release() // what the command left behind is left alone
			return exitStatus(c.status)
		case <-c.stopped:
			// Ctrl-Z on the terminal, or the command read the terminal
			// from the background: stop too, as the shell's job, so that
			// the shell gets the terminal back and can continue us.
			if term != nil && proctree.Stopped(c.pid) {
				j.stop()
			}
		case <-jobStops:
			j.stop()
		case <-continued:
			j.cont()
		case <-follow.C:
			if k := r.killAt(lock); k.After(killAt) {
				killAt = k
				wd.KillAt(k)
			}
		case s := <-sigs:
			r.log.Info("forwarding " + s.String() + " to the command")
			c.signalGroup(s.(syscall.Signal))
		case <-lock.Done():
			r.fail("lock lost", lock.Err())
			r.stopAfterLoss(lock, c, sigs)
			return ExitLockLost
		}
	}
}

// startWatchdog starts the watchdog and through it the command, or
// returns the exit status that says why not.
func (r *runner) startWatchdog(lock *client.Lock) (*watchdog.Watchdog, int) {
	exe, err := watchdog.Self()
	if err != nil {
		r.fail("cannot start the watchdog", err)
		return nil, ExitInternal
	}
	term := controllingTerminal()
	wd, err := watchdog.Start(watchdog.Spec{
		Exe:  exe,
		Argv: r.o.command,
		Env: append(os.Environ(),
			"MONOLOCK_TOKEN="+strconv.FormatUint(lock.Token(), 10),
			"MONOLOCK_NAME="+lock.Name(),
		),
		Foreground: term != nil && term.ours(),
		KillAt:     r.killAt(lock),
	})
	var se *watchdog.StartError
	switch {
	case errors.As(err, &se):
		r.fail("", err)
		return nil, se.Status
	case err != nil:
		r.fail("cannot start the command", err)
		return nil, ExitInternal
	}
	return wd, 0
}

// killAt is the watchdog's deadline for the lease end the lock has now:
// its SIGKILL then has the kill allowance to finish and the work gap to
// spare before the server can grant the lock to anyone else, as the stop
// after a loss has.
func (r *runner) killAt(lock *client.Lock) time.Time {
	return lock.LeaseEnd().Add(-killAllowance - workGap(r.o.lease))
}

// reportWatchdogKill tells how the watchdog's kill ended, if it killed,
// and reports whether it did.
func (r *runner) reportWatchdogKill(c *child, leaseEnd time.Time) bool {
	ev := c.killedBy.Load()
	if ev == nil {
		return false
	}
	margin := leaseEnd.Sub(ev.LastReaped)
	r.log.Warn(fmt.Sprintf("the watchdog killed the command at its deadline, monolock run having been stopped or unable to run past it: %d processes dead and reaped (all needed SIGKILL), %v before the lock can pass on",
		ev.Count, margin.Round(time.Millisecond)),
		"outcome", "watchdog", "killed", ev.Count, "margin", margin.String())
	return true
}

// stopAfterLoss stops the command and everything it started, so that all
// of it is dead and reaped a work gap before the server can grant the lock
// to anyone else, and tells how that went. The lock's connection stays open
// until then and a work gap longer (Release follows), or until the lease
// end, where the client closes it on its own.
func (r *runner) stopAfterLoss(lock *client.Lock, c *child, sigs <-chan os.Signal) {
	now := time.Now()
	gap := workGap(r.o.lease)
	plan := planStop(now, lock.LeaseEnd(), r.o.grace, gap)
	plan.kicked = kicked(lock.Err())
	next := "the lock can pass on in " + plan.leaseEnd.Sub(now).Round(time.Millisecond).String()
	if plan.kicked {
		next = "the lock has passed on already (kicked by an administrator)"
	}
	// Past the watchdog's deadline, its kill has begun before this stop
	// could: monolock run was stopped or could not run. Before it, this
	// stop is in charge (the watchdog may kill at the same last instant).
	watchdogFirst := !now.Before(r.killAt(lock))
	switch {
	case watchdogFirst:
		// What is left after the watchdog's kill is ours to see to.
	case plan.kill.After(now):
		r.log.Error(fmt.Sprintf("stopping the command: SIGTERM now, SIGKILL in %v; %s", plan.kill.Sub(now).Round(time.Millisecond), next))
	default:
		r.log.Error("stopping the command: SIGKILL now, too late for SIGTERM; " + next)
	}
	report := newStopper(c, plan, sigs).run()
	if watchdogFirst && r.reportWatchdogKill(c, plan.leaseEnd) && report.phase == stopReaped && report.processes == 0 {
		// The watchdog had killed everything: nothing more to tell.
	} else {
		r.reportStop(report)
	}
	if report.phase == stopReaped && !plan.kicked {
		// The next holder starts no sooner than our close: keep the gap
		// between the end of this command's work and the start of its.
		hold := min(time.Until(plan.leaseEnd), gap)
		time.Sleep(max(hold, 0))
	}
}

// kicked reports whether the loss is an administrator's kick, after which
// the server has granted the lock to the next waiter at once: the one loss
// the stop cannot finish ahead of.
func kicked(err error) bool {
	var se *client.ServerError
	return errors.As(err, &se) && se.Code == protocol.ErrAdminClosed.Code
}

// exitStatus maps how the command ended to our exit status.
func exitStatus(ws unix.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}
