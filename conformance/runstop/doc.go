// Package runstop checks the guarantee of `monolock run` end to end: after
// a lost lock, every process of the command is dead and reaped before the
// server grants the lock to the next claim. Its test runs the real binary
// (monolock serve and monolock run, $MONOLOCK_BIN or built from ../go),
// puts the fault proxy between monolock run and the server, and has a
// second client wait for the same lock directly at the server; each fault
// of the safety-margin benchmark hits the holder's link in turn. The job
// stop cases do the same for a monolock run that is stopped: Ctrl-Z in an
// interactive shell (bash on a pseudo-terminal) with stdin redirected, and
// SIGSTOP of monolock run alone under a blackholed link.
package runstop
