//go:build unix

package runcmd

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/monolock/monolock/go/client"
	"github.com/monolock/monolock/go/internal/proctree"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// forwarded are the signals passed on to the command's process group.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// child is the running command. Its process group has its pid as id.
type child struct {
	pid     int
	stopped chan struct{} // a stop (SIGTSTP, SIGTTIN, SIGSTOP...) of the command
	done    chan struct{} // closed once the command has ended and status is set
	status  unix.WaitStatus
	reaped  chan struct{} // a process below monolock run was reaped (one pending is enough)
	allGone chan struct{} // closed when monolock run has no child left, the command included
}

func newChild(pid int) *child {
	return &child{
		pid:     pid,
		stopped: make(chan struct{}, 1),
		done:    make(chan struct{}),
		reaped:  make(chan struct{}, 1),
		allGone: make(chan struct{}),
	}
}

// reap waits for every child of monolock run: the command, telling its
// stops on the way (Wait4 with WUNTRACED is the one wait that sees both, so
// exec.Cmd.Wait is not used), and, monolock run being a subreaper, every
// orphan of the command's descendants, so none stays a zombie. It returns
// at ECHILD: nothing is left below monolock run, and as nothing but the
// command was started, nothing can appear there any more.
func (c *child) reap() {
	defer close(c.allGone)
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WUNTRACED, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			// ECHILD. The command cannot still be waiting to be reaped
			// here; should it, impossibly, there is nothing to wait for.
			if !closed(c.done) {
				close(c.done)
			}
			return
		case ws.Stopped():
			if pid == c.pid {
				notify(c.stopped)
			}
			// A stopped orphan is continued by the stop after a loss.
			continue
		case pid == c.pid:
			c.status = ws
			close(c.done)
		}
		notify(c.reaped)
	}
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
	cmd := exec.Command(r.o.command[0], r.o.command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(),
		"MONOLOCK_TOKEN="+strconv.FormatUint(lock.Token(), 10),
		"MONOLOCK_NAME="+lock.Name(),
	)
	// Its own process group, so that one signal reaches every descendant.
	// The lock's socket is close-on-exec (Go opens every descriptor so), so
	// the command cannot keep the lock alive after monolock run is gone.
	cmd.SysProcAttr = procAttr()
	term := controllingTerminal()
	if term != nil && term.ours() {
		// The group takes the terminal in the child, before exec and with
		// its signals blocked, so the command can read it from the start.
		cmd.SysProcAttr.Foreground, cmd.SysProcAttr.Ctty = true, term.fd
	}
	if err := lock.Err(); err != nil {
		r.fail("lock lost before the command started", err)
		return ExitLockLost
	}
	// Before the start: an orphan reparented before the call would be lost.
	if err := proctree.BecomeSubreaper(); err != nil {
		r.log.Warn("processes that leave the command's process group will not be stopped after a loss", "err", err)
	}
	if err := cmd.Start(); err != nil {
		r.fail("", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return ExitNotFound
		}
		return ExitCannotExec
	}
	c := newChild(cmd.Process.Pid)
	go c.reap()
	defer cmd.Process.Release() // reaped by reap, not by Wait

	var continued chan os.Signal // nil without a terminal: never ready
	if term != nil {
		// Taking the terminal back from the background needs SIGTTOU
		// ignored; not before the start, or the command would inherit it.
		signal.Ignore(syscall.SIGTTOU)
		continued = make(chan os.Signal, 1)
		signal.Notify(continued, syscall.SIGCONT)
		defer func() {
			signal.Stop(continued)
			term.move(c.pid, ownGroup())
			signal.Reset(syscall.SIGTTOU)
		}()
	}

	for {
		select {
		case <-c.done:
			if err := lock.Err(); err != nil && !errors.Is(err, client.ErrReleased) {
				// Lost before the command finished: its work was not
				// fully protected, whatever its own status says, and
				// what it left behind is stopped as for any loss.
				r.fail("lock lost", err)
				r.stopAfterLoss(lock, c, sigs)
				return ExitLockLost
			}
			return exitStatus(c.status)
		case <-c.stopped:
			// Ctrl-Z, or the command read the terminal from the
			// background: stop too, as the shell's job, so that the shell
			// gets the terminal back and can continue us (fg, bg).
			if term != nil {
				term.move(c.pid, ownGroup())
				_ = syscall.Kill(syscall.Getpid(), syscall.SIGTSTP)
			}
		case <-continued:
			if term.ours() { // fg: the command gets the terminal again
				term.move(ownGroup(), c.pid)
			}
			_ = syscall.Kill(-c.pid, syscall.SIGCONT)
		case s := <-sigs:
			r.log.Info("forwarding " + s.String() + " to the command")
			_ = syscall.Kill(-c.pid, s.(syscall.Signal))
		case <-lock.Done():
			r.fail("lock lost", lock.Err())
			r.stopAfterLoss(lock, c, sigs)
			return ExitLockLost
		}
	}
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
	r.log.Error(fmt.Sprintf("stopping the command: SIGTERM now, SIGKILL in %v; %s", plan.kill.Sub(now).Round(time.Millisecond), next))
	report := newStopper(c, plan, sigs).run()
	r.reportStop(report)
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
