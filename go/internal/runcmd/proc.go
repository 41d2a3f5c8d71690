//go:build unix

package runcmd

// proc is one process as /proc showed it: the pid with its start time,
// which tells it from a later process that reuses the pid.
type proc struct {
	pid, ppid int
	start     uint64 // field 22 of /proc/PID/stat: clock ticks after boot
	state     byte   // R, S, D, Z, T...
	comm      string
}

// procID identifies a process across pid reuse, and across the exec
// that changes its name.
type procID struct {
	pid   int
	start uint64
}

func (p proc) id() procID { return procID{p.pid, p.start} }

// stateName spells out the process states that matter to a kill.
func (p proc) stateName() string {
	switch p.state {
	case 'D':
		return "D (uninterruptible sleep)"
	case 'Z':
		return "Z (zombie)"
	case 'T', 't':
		return string(p.state) + " (stopped)"
	}
	return string(p.state)
}
