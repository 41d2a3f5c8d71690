//go:build unix && !linux

package proctree

import "syscall"

// BecomeSubreaper does nothing: child subreapers are Linux only, and
// elsewhere a process that leaves its process group cannot be followed
// (docs/monolock-run.md says so); only the group is stopped.
func BecomeSubreaper() error { return nil }

// Descendants finds nothing beyond the process group on this system.
func Descendants(int) []Proc { return nil }

// Signal is never called without Descendants.
func Signal(Proc, syscall.Signal) bool { return false }

// Stopped cannot look on this system: a process said to have stopped is
// taken at its word.
func Stopped(int) bool { return true }
