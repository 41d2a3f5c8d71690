//go:build unix

// Package proctree finds and signals the processes below a process, safely
// across pid reuse. `monolock run` and its watchdog use it to stop every
// process a command started, also those that left its process group.
package proctree

// Proc is one process as /proc showed it: the pid with its start time,
// which tells it from a later process that reuses the pid.
type Proc struct {
	Pid, PPid int
	Start     uint64 // field 22 of /proc/PID/stat: clock ticks after boot
	State     byte   // R, S, D, Z, T...
	Comm      string
}

// ID identifies a process across pid reuse, and across the exec
// that changes its name.
type ID struct {
	Pid   int
	Start uint64
}

// ID returns the process's identity.
func (p Proc) ID() ID { return ID{p.Pid, p.Start} }

// StateName spells out the process states that matter to a kill.
func (p Proc) StateName() string {
	switch p.State {
	case 'D':
		return "D (uninterruptible sleep)"
	case 'Z':
		return "Z (zombie)"
	case 'T', 't':
		return string(p.State) + " (stopped)"
	}
	return string(p.State)
}
