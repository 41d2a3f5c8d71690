//go:build unix

// Package watchdog is the dead man's switch of `monolock run`: a small
// process between monolock run and the command that kills the command's
// whole tree at a deadline unless monolock run keeps moving the deadline
// on. monolock run's own stop after a loss needs monolock run to be
// scheduled; the watchdog does not, so a SIGSTOP of monolock run, or a
// monolock run starved of CPU or swapped out, still cannot let the command
// work past the lock.
//
// The process tree:
//
//	monolock run            holds the lock; sends the deadline on
//	└─ monolock run-watchdog  its own process group; parent and subreaper of the command
//	   └─ CMD               its own process group (the terminal's foreground one, on a terminal)
//
// The watchdog sits in a process group of its own and catches the job
// control and terminal signals, so neither Ctrl-Z nor a signal to
// monolock run's job stops it, and orphans of the command go to it, never
// to a stopped monolock run. It is the command's parent, so it sees the
// command's stops and exit and tells monolock run over a pipe.
//
// The two talk over two pipes, one line a message (wire.go): monolock run
// sends "kill-at NS" (the deadline on CLOCK_MONOTONIC, which both
// processes share) and "release"; the watchdog sends "started PID",
// "failed STATUS TEXT", "stopped", "exited WAITSTATUS", "killing" and
// "killed N NS".
//
// The watchdog kills the tree (SIGKILL to the command's group and to every
// process below the watchdog, again until nothing is left) when the
// deadline passes, or at once when monolock run goes away without a
// "release" (its end of the pipe closes: it was killed). After a release
// it leaves as soon as the command has ended, and leaves what the command
// left behind alone, as monolock run always has. What it cannot do:
// anything while it is itself stopped or the machine is frozen; the
// fencing token covers that (docs/monolock-run.md).
package watchdog
