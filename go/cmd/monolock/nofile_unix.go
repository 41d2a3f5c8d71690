//go:build unix

package main

import "syscall"

// openFileLimit is the process's soft RLIMIT_NOFILE (RLIM_INFINITY reads as
// a huge number, which maxSessionsFor caps).
func openFileLimit() (uint64, bool) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, false
	}
	return uint64(r.Cur), true
}
