//go:build unix

package runcmd

import (
	"fmt"
	"time"
)

// killAllowance is the part of a lost lock's last 0.2 x lease that is kept
// for SIGKILL to finish: from the kill to every process of the command dead
// and reaped, on a loaded machine. docs/monolock-run.md ("How much time a
// kill needs") has the measurements behind the figure.
const killAllowance = 250 * time.Millisecond

// maxLease is the longest lease the protocol carries (2^32-1 ms).
const maxLease = (1<<32 - 1) * time.Millisecond

// workGap is how long the lock's connection stays open after the last
// process of a lost lock's command is reaped (never past the lease end):
// the next holder's work then starts at least that long after this one's
// ended, even when the server frees the lock at the close (a link that
// drops only our acks still carries the FIN). A twentieth of the lease.
func workGap(lease time.Duration) time.Duration { return lease / 20 }

// stopBudget is how long the server still cannot grant the lock to anyone
// else after the client's loss deadline: the client gives up at 0.8 x lease
// after the send of its last acknowledged message, the server at a full
// lease after it at the earliest. The client's 0.8 x lease is lease*4/5,
// so this is ceil(lease/5).
func stopBudget(lease time.Duration) time.Duration { return lease - lease*4/5 }

// graceRoom is the longest --grace that fits lease: SIGTERM, then SIGKILL
// after the grace, the kill allowance for it to finish, and the work gap
// must all fall within the stop budget. Negative when nothing fits.
func graceRoom(lease time.Duration) time.Duration {
	return stopBudget(lease) - killAllowance - workGap(lease)
}

// graceFor returns the time between SIGTERM and SIGKILL after a loss: the
// --grace given, if it fits the lease, else (none given) the longest that
// fits. Every process must be reaped a work gap before the server can
// grant the lock again; the error of a lease or grace that cannot fit says
// which lease would.
func graceFor(lease, grace time.Duration, given bool) (time.Duration, error) {
	budget := stopBudget(lease)
	fits := graceRoom(lease)
	switch {
	case given && grace > graceRoom(maxLease):
		return 0, fmt.Errorf("--grace %v is longer than any lease can fit (at most %v, with the longest lease, %v)",
			grace, graceRoom(maxLease), maxLease)
	case fits < 0 && !given:
		return 0, fmt.Errorf("--lease %v is too short for monolock run: a lost lock leaves 0.2 x lease = %v before the server can grant it to anyone else, less than the %v that SIGKILL needs to finish plus the 0.05 x lease = %v kept between this command's end and the next holder's start; use --lease %v or more",
			lease, budget, killAllowance, workGap(lease), leaseFor(0))
	case given && grace > fits:
		return 0, fmt.Errorf("--grace %v does not fit --lease %v: SIGTERM, SIGKILL, the %v that SIGKILL needs to finish and the 0.05 x lease = %v kept between this command's end and the next holder's start must fall within the 0.2 x lease = %v between a lost lock and the server's next grant; use --lease %v or more for this --grace%s",
			grace, lease, killAllowance, workGap(lease), budget, leaseFor(grace), longestGrace(fits))
	case !given:
		return fits, nil
	}
	return grace, nil
}

// longestGrace suggests the longest --grace that fits, if any does.
func longestGrace(fits time.Duration) string {
	if fits < 0 {
		return ""
	}
	return fmt.Sprintf(", or --grace %v at most with this lease", fits)
}

// leaseFor is the shortest lease, in whole milliseconds, whose grace room
// holds grace: about (grace + allowance) / 0.15, from which the integer
// rounding of the budget and the gap is settled by counting up.
func leaseFor(grace time.Duration) time.Duration {
	lease := (grace + killAllowance) * 20 / 3 / time.Millisecond * time.Millisecond
	for graceRoom(lease) < grace {
		lease += time.Millisecond
	}
	for lease > time.Millisecond && graceRoom(lease-time.Millisecond) >= grace {
		lease -= time.Millisecond
	}
	return lease
}
