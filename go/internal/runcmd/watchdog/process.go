//go:build unix

package watchdog

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/monolock/monolock/go/internal/proctree"
)

// Subcommand is the watchdog's hidden subcommand of the monolock binary.
const Subcommand = "run-watchdog"

// The watchdog's ends of the two pipes, as monolock run passes them.
const (
	controlFd = 3
	eventFd   = 4
)

// Exit statuses for a command that could not start, as monolock run has
// always given them.
const (
	exitCannotExec = 126
	exitNotFound   = 127
)

// sweepEvery is how often a kill looks again for what is left: a process
// forked just before its parent's SIGKILL is seen only after that parent
// is gone.
const sweepEvery = 5 * time.Millisecond

// Main is the watchdog process, `monolock run-watchdog --kill-at NS
// [--foreground] -- CMD [ARGS...]`, with monolock run's control pipe on fd 3
// and its event pipe on fd 4. It returns the exit status.
func Main(args []string) int {
	if !isPipe(controlFd) || !isPipe(eventFd) {
		fmt.Fprintln(os.Stderr, "monolock "+Subcommand+": started by monolock run only (it needs its pipes)")
		return 2
	}
	// Only the watchdog has them: the command must not keep them open.
	syscall.CloseOnExec(controlFd)
	syscall.CloseOnExec(eventFd)
	killAt, foreground, argv, err := parseArgs(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "monolock "+Subcommand+":", err)
		return 2
	}
	// Neither Ctrl-Z nor a terminal's signals stop or end the watchdog;
	// caught (not ignored) so that the command starts with the defaults.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU,
		syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP, syscall.SIGTERM)
	// The command's parent-death signal is tied to the thread that forks it.
	runtime.LockOSThread()
	// Orphans of the command come here, not to monolock run, which may be
	// stopped: so they are found, killed and reaped at the deadline.
	_ = proctree.BecomeSubreaper()

	w := &watchdog{events: newEventWriter(os.NewFile(eventFd, "events"))}
	defer w.events.close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = CommandAttr()
	if foreground {
		// The group takes the terminal on stdin in the child, before exec
		// and with its signals blocked, so the command can read it from
		// the start.
		cmd.SysProcAttr.Foreground, cmd.SysProcAttr.Ctty = true, 0
	}
	if err := cmd.Start(); err != nil {
		status := exitCannotExec
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			status = exitNotFound
		}
		w.events.send(Event{Kind: Failed, Status: status, Text: err.Error()})
		return 0
	}
	w.cmd = cmd.Process.Pid
	w.group = proctree.NewGroup(w.cmd)
	w.seen = map[proctree.ID]bool{}
	w.events.send(Event{Kind: Started, Pid: w.cmd})
	return w.run(killAt, readControl(os.NewFile(controlFd, "control")), reapAll())
}

func parseArgs(args []string) (killAt time.Duration, foreground bool, argv []string, err error) {
	for len(args) > 0 {
		switch args[0] {
		case "--kill-at":
			if len(args) < 2 {
				return 0, false, nil, errors.New("--kill-at needs a value")
			}
			ns, err := strconv.ParseInt(args[1], 10, 64)
			if err != nil || ns < 0 {
				return 0, false, nil, fmt.Errorf("--kill-at %q", args[1])
			}
			killAt, args = time.Duration(ns), args[2:]
		case "--foreground":
			foreground, args = true, args[1:]
		case "--":
			if len(args) < 2 {
				return 0, false, nil, errors.New("no command after --")
			}
			return killAt, foreground, args[1:], nil
		default:
			return 0, false, nil, fmt.Errorf("unknown argument %q", args[0])
		}
	}
	return 0, false, nil, errors.New("no command")
}

func isPipe(fd int) bool {
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO
}

// watchdog is the state of the watchdog process.
type watchdog struct {
	cmd        int // the command's pid
	group      *proctree.Group
	events     *eventWriter
	cmdReaped  bool
	released   bool
	killing    bool
	seen       map[proctree.ID]bool // every process that got SIGKILL
	lastReaped time.Time
}

// run waits for the command's end, the deadline, monolock run's release
// or its going away, and returns when nothing it must watch is left.
func (w *watchdog) run(killAt time.Duration, controls <-chan control, reaps <-chan reaped) int {
	deadline := time.NewTimer(time.Until(fromMono(killAt)))
	defer deadline.Stop()
	var sweep <-chan time.Time // ticks while killing
	for {
		select {
		case c, ok := <-controls:
			switch {
			case !ok: // monolock run has gone, or sent what it never sends
				controls = nil
				if !w.released && !w.killing {
					sweep = w.startKill()
				}
			case c.release:
				w.released = true
				if w.cmdReaped {
					return 0
				}
			case !w.killing:
				deadline.Reset(time.Until(fromMono(c.killAt)))
			}
		case r := <-reaps:
			switch {
			case r.err != nil: // nothing is left below the watchdog
				if w.killing {
					w.events.send(Event{Kind: Killed, Count: len(w.seen), LastReaped: w.lastReaped})
				}
				return 0
			case r.status.Stopped():
				if r.pid == w.cmd {
					w.events.send(Event{Kind: Stopped})
				}
				continue // a stopped orphan gets its SIGKILL all the same
			}
			w.lastReaped = time.Now()
			if r.pid == w.cmd {
				w.cmdReaped = true
				w.events.send(Event{Kind: Exited, Wait: r.status})
				if w.released {
					return 0
				}
			}
			if w.killing {
				w.kill()
			}
		case <-deadline.C:
			if !w.released && !w.killing {
				sweep = w.startKill()
			}
		case <-sweep:
			w.kill()
		}
	}
}

// startKill kills the tree and returns the ticks of the sweeps that follow.
func (w *watchdog) startKill() <-chan time.Time {
	w.killing = true
	w.events.send(Event{Kind: Killing})
	w.kill()
	return time.NewTicker(sweepEvery).C
}

// kill sends SIGKILL to every process below the watchdog and to the
// command's group. The look comes first, so that the count includes what
// the group's kill fells in one call.
func (w *watchdog) kill() {
	procs := proctree.Descendants(os.Getpid())
	w.group.Signal(syscall.SIGKILL, w.cmdReaped)
	for _, p := range procs {
		if p.State == 'Z' {
			continue // dead already, waiting to be reaped
		}
		w.seen[p.ID()] = true
		proctree.Signal(p, syscall.SIGKILL)
	}
}

// reaped is one child reaped or stopped, or err at the end (ECHILD).
type reaped struct {
	pid    int
	status unix.WaitStatus
	err    error
}

// reapAll waits for every child of the watchdog, the command and every
// orphan below it, telling stops of the command on the way; it ends at
// ECHILD, after which nothing can appear below the watchdog any more.
func reapAll() <-chan reaped {
	out := make(chan reaped, 16)
	go func() {
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WUNTRACED, nil)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			out <- reaped{pid: pid, status: ws, err: err}
			if err != nil {
				return
			}
		}
	}()
	return out
}

// readControl reads monolock run's messages; the channel closes at the
// end of the pipe, and at a message that is not one (taken as the end: the
// safe reading of a monolock run that says what it never says).
func readControl(f *os.File) <-chan control {
	out := make(chan control, 4)
	go func() {
		defer close(out)
		s := bufio.NewScanner(f)
		for s.Scan() {
			c, err := parseControl(s.Text())
			if err != nil {
				return
			}
			out <- c
		}
	}()
	return out
}

// eventWriter sends events to monolock run in order, from a goroutine of
// its own: the watchdog's loop never waits on a monolock run that does not
// read (it may be stopped), and a write to a monolock run that has gone
// fails and ends it.
type eventWriter struct {
	queue chan Event
	done  chan struct{}
}

func newEventWriter(w io.WriteCloser) *eventWriter {
	e := &eventWriter{queue: make(chan Event, 64), done: make(chan struct{})}
	go func() {
		defer close(e.done)
		defer w.Close()
		for ev := range e.queue {
			if _, err := io.WriteString(w, ev.line()); err != nil {
				for range e.queue { // drain: nobody reads any more
				}
				return
			}
		}
	}()
	return e
}

// send queues ev. Only repeated stops of a command that monolock run does
// not read about could fill the queue: beyond it they are dropped.
func (e *eventWriter) send(ev Event) {
	select {
	case e.queue <- ev:
	default:
	}
}

// close writes what is queued and ends the pipe.
func (e *eventWriter) close() {
	close(e.queue)
	<-e.done
}
