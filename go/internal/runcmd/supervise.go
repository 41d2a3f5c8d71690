//go:build unix

package runcmd

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/monolock/monolock/go/client"
)

// forwarded are the signals passed on to the command's process group.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// child is the running command. Its process group has its pid as id.
type child struct {
	pid     int
	stopped chan struct{} // a stop (SIGTSTP, SIGTTIN, SIGSTOP...) of the command
	done    chan struct{} // closed once the command has ended and status is set
	status  unix.WaitStatus
}

// reap waits for the command, telling its stops on the way: Wait4 with
// WUNTRACED is the one wait that sees both, so exec.Cmd.Wait is not used.
func (c *child) reap() {
	for {
		var ws unix.WaitStatus
		_, err := unix.Wait4(c.pid, &ws, unix.WUNTRACED, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err == nil && ws.Stopped():
			select {
			case c.stopped <- struct{}{}:
			default: // one pending stop is enough
			}
			continue
		}
		// Exited or killed (or, impossibly, ECHILD: then there is nothing
		// left to wait for either).
		c.status = ws
		close(c.done)
		return
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
	if err := cmd.Start(); err != nil {
		r.fail("", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return ExitNotFound
		}
		return ExitCannotExec
	}
	c := &child{pid: cmd.Process.Pid, stopped: make(chan struct{}, 1), done: make(chan struct{})}
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
				// fully protected, whatever its own status says.
				r.fail("lock lost", err)
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
			r.log.Error("stopping the command: SIGTERM now, SIGKILL after " + r.o.grace.String())
			r.stopGroup(c, sigs)
			return ExitLockLost
		}
	}
}

// stopGroup ends the process group: SIGTERM, then SIGKILL once the grace
// period is over, unless every member has exited before. Members outlive the
// command itself when it leaves children behind, so the group is watched,
// not the command.
func (r *runner) stopGroup(c *child, sigs <-chan os.Signal) {
	pgid := c.pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	_ = syscall.Kill(-pgid, syscall.SIGCONT) // a stopped member must run to die
	grace := time.NewTimer(r.o.grace)
	defer grace.Stop()
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for {
		select {
		case <-grace.C:
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-c.done
			return
		case s := <-sigs:
			_ = syscall.Kill(-pgid, s.(syscall.Signal))
		case <-poll.C:
			// The command itself stays a zombie until reap waits for it,
			// so an empty group shows only after done.
			select {
			case <-c.done:
				if syscall.Kill(-pgid, 0) == syscall.ESRCH {
					return
				}
			default:
			}
		}
	}
}

// exitStatus maps how the command ended to our exit status.
func exitStatus(ws unix.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}
