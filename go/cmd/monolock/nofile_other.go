//go:build !unix

package main

// openFileLimit: no RLIMIT_NOFILE here (Windows), so no default session limit.
func openFileLimit() (uint64, bool) { return 0, false }
