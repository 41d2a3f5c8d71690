//go:build unix && !linux

package runcmd

import "syscall"

// becomeSubreaper does nothing: child subreapers are Linux only, and
// elsewhere a process that leaves the command's process group cannot be
// followed (docs/monolock-run.md says so); only the group is stopped.
func becomeSubreaper() error { return nil }

// descendants finds nothing beyond the process group on this system.
func descendants(int) []proc { return nil }

// signalProc is never called without descendants.
func signalProc(proc, syscall.Signal) bool { return false }
