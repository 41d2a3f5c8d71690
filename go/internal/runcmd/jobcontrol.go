//go:build unix

package runcmd

import (
	"os"
	"syscall"
	"time"

	"github.com/monolock/monolock/go/client"
)

// job is the command's tree as the shell's job: it stops when monolock run
// is stopped (Ctrl-Z, SIGTSTP, SIGTTIN) and continues with it while the
// lock holds. Without this, a Ctrl-Z of monolock run alone, whose command
// runs in another process group, would stop the heartbeats but not the
// work.
type job struct {
	c         *child
	term      *terminal // nil without a terminal on stdin
	lock      *client.Lock
	continued <-chan os.Signal // SIGCONT
}

// stop stops the whole tree of the command, gives the terminal back to
// monolock run's group, and then stops monolock run itself, so that the
// shell sees its job stop; when monolock run is continued, so is the tree
// (cont). monolock run stops with SIGSTOP, which the shell reports as
// "Stopped (signal)": once caught, SIGTSTP cannot be given back its
// default action in a Go program (signal.Reset keeps the runtime's
// handler, which drops it), and SIGSTOP is also the one stop that no
// process group discards.
func (j *job) stop() {
	// SIGSTOP here too: a command may catch SIGTSTP and keep running.
	j.c.signalTree(syscall.SIGSTOP)
	j.c.treeStopped = true
	if j.term != nil {
		j.term.move(j.c.pid, ownGroup())
	}
	select {
	case <-j.continued: // an old one: the continue to wait for is the next
	default:
	}
	_ = syscall.Kill(syscall.Getpid(), syscall.SIGSTOP)
	<-j.continued
	j.cont()
}

// cont continues the tree after a job stop, with the terminal if monolock
// run has it, unless the lock was lost meanwhile: then the tree stays
// stopped until the stop after the loss ends it, and nothing of it runs
// later than that allows.
func (j *job) cont() {
	if !j.c.treeStopped || j.lock.Err() != nil || !time.Now().Before(j.lock.ValidUntil()) {
		return
	}
	j.c.treeStopped = false
	if j.term != nil && j.term.ours() { // fg: the command gets the terminal again
		j.term.move(ownGroup(), j.c.pid)
	}
	j.c.signalTree(syscall.SIGCONT)
}
