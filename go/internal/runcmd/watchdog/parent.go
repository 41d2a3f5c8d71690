//go:build unix

package watchdog

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Spec is the command a watchdog runs.
type Spec struct {
	Exe        string    // the monolock binary, which runs the watchdog as its Subcommand
	Argv       []string  // the command
	Env        []string  // the command's environment
	Dir        string    // its working directory; "": monolock run's
	Foreground bool      // the command's group takes the terminal on stdin
	KillAt     time.Time // the first deadline
}

// StartError is a command that could not be started.
type StartError struct {
	Status int    // monolock run's exit status for it: 126, or 127 when not found
	Text   string // why, as exec tells it
}

func (e *StartError) Error() string { return e.Text }

// Watchdog is monolock run's end of a running watchdog.
type Watchdog struct {
	Pid     int // the watchdog process: monolock run's child, which it reaps
	Command int // the command's pid, also its process group's id
	// Events brings Stopped, Exited, Killing and Killed after the start,
	// and is closed when the watchdog has gone.
	Events <-chan Event
	ctl    *os.File // the control pipe
	ctlFd  int      // its descriptor, non-blocking
}

// Self is the path that runs this program again.
func Self() (string, error) {
	if runtime.GOOS == "linux" {
		return "/proc/self/exe", nil // also when the binary was replaced since
	}
	return os.Executable()
}

// Start starts the watchdog and, through it, the command; it returns once
// the command runs, or with a *StartError when it could not start.
func Start(s Spec) (*Watchdog, error) {
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer ctlR.Close()
	evR, evW, err := os.Pipe()
	if err != nil {
		ctlW.Close()
		return nil, err
	}
	args := []string{Subcommand, "--kill-at", strconv.FormatInt(int64(toMono(s.KillAt)), 10)}
	if s.Foreground {
		args = append(args, "--foreground")
	}
	cmd := exec.Command(s.Exe, append(append(args, "--"), s.Argv...)...)
	cmd.Args[0] = "monolock" // as ps shows it, rather than /proc/self/exe
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env, cmd.Dir = s.Env, s.Dir
	cmd.ExtraFiles = []*os.File{ctlR, evW} // fd 3 and 4
	// Its own group: a signal to monolock run's job never reaches it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	evW.Close()
	if err != nil {
		ctlW.Close()
		evR.Close()
		return nil, fmt.Errorf("starting the watchdog: %w", err)
	}
	pid := cmd.Process.Pid
	_ = cmd.Process.Release() // monolock run reaps every child itself
	lines := bufio.NewScanner(evR)
	first, err := nextEvent(lines)
	switch {
	case err != nil:
		ctlW.Close()
		evR.Close()
		return nil, fmt.Errorf("the watchdog (pid %d) did not start the command: %w", pid, err)
	case first.Kind == Failed:
		ctlW.Close()
		evR.Close()
		return nil, &StartError{Status: first.Status, Text: first.Text}
	case first.Kind != Started:
		ctlW.Close()
		evR.Close()
		return nil, fmt.Errorf("the watchdog (pid %d) said %v before the command started", pid, first.Kind)
	}
	// Never block monolock run on a watchdog that does not read: a
	// deadline that is not delivered only makes it kill sooner.
	// (Fd puts the file in blocking mode: it is called once, before.)
	ctlFd := int(ctlW.Fd())
	if err := unix.SetNonblock(ctlFd, true); err != nil {
		ctlW.Close()
		evR.Close()
		return nil, err
	}
	events := make(chan Event, 8)
	go func() {
		defer close(events)
		defer evR.Close()
		for {
			ev, err := nextEvent(lines)
			if err != nil {
				return
			}
			events <- ev
		}
	}()
	return &Watchdog{Pid: pid, Command: first.Pid, Events: events, ctl: ctlW, ctlFd: ctlFd}, nil
}

// nextEvent reads one event; io.EOF when the watchdog has gone.
func nextEvent(lines *bufio.Scanner) (Event, error) {
	if !lines.Scan() {
		if err := lines.Err(); err != nil {
			return Event{}, err
		}
		return Event{}, errors.New("end of the event pipe")
	}
	return parseEvent(lines.Text())
}

// KillAt moves the deadline to t. A deadline the watchdog does not get
// (its pipe is full: it is stopped) leaves the earlier one in force.
func (w *Watchdog) KillAt(t time.Time) {
	w.write(control{killAt: toMono(t)})
}

// Release tells the watchdog that the command ended under the lock: it
// leaves once the command is reaped and kills nothing.
func (w *Watchdog) Release() {
	w.write(control{release: true})
}

// Close closes the control pipe. Without a Release before, the watchdog
// takes it as monolock run's end and kills the tree.
func (w *Watchdog) Close() { _ = w.ctl.Close() }

func (w *Watchdog) write(c control) {
	// One write of a short line to a pipe is atomic: it goes whole or not
	// at all (EAGAIN), never in part.
	_, _ = unix.Write(w.ctlFd, []byte(c.line()))
}

func (k Kind) String() string {
	return [...]string{"started", "failed", "stopped", "exited", "killing", "killed"}[k]
}
