//go:build unix

package runcmd

import (
	"os"

	"golang.org/x/sys/unix"
)

// terminal is the controlling terminal on stdin. The command runs in a
// process group of its own, and only the terminal's foreground group may
// read it (the others are stopped by SIGTTIN): so while the command runs,
// its group is the foreground group, and monolock run takes the terminal
// back when the command stops or ends, as a shell does for its jobs.
type terminal struct{ fd int }

// controllingTerminal returns stdin as a terminal, or nil when it is not
// monolock run's controlling terminal (a file, a pipe, another terminal).
func controllingTerminal() *terminal {
	t := &terminal{fd: int(os.Stdin.Fd())}
	if t.foreground() < 0 {
		return nil
	}
	return t
}

// foreground returns the terminal's foreground process group, or -1.
func (t *terminal) foreground() int {
	pgrp, err := unix.IoctlGetInt(t.fd, unix.TIOCGPGRP)
	if err != nil {
		return -1
	}
	return pgrp
}

// ours reports whether monolock run's group is in the foreground.
func (t *terminal) ours() bool { return t.foreground() == ownGroup() }

// move hands the terminal from group from to group to, if from is its
// foreground group now (and never takes it from anyone else). From a
// background group this needs SIGTTOU ignored, which supervise does.
func (t *terminal) move(from, to int) {
	if t.foreground() == from {
		_ = unix.IoctlSetPointerInt(t.fd, unix.TIOCSPGRP, to)
	}
}

// ownGroup returns monolock run's process group.
func ownGroup() int {
	pgrp, _ := unix.Getpgid(0) // cannot fail for the calling process
	return pgrp
}
