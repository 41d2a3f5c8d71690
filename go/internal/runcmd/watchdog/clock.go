//go:build unix

package watchdog

import (
	"time"

	"golang.org/x/sys/unix"
)

// The deadline travels between the two processes on CLOCK_MONOTONIC, the
// clock they share; each converts from and to its own time.Time, whose
// monotonic reading is the same clock, by the offset at that instant.

// monoNow reads CLOCK_MONOTONIC.
func monoNow() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) // cannot fail for this clock
	return time.Duration(ts.Nano())
}

// toMono returns t as a CLOCK_MONOTONIC reading.
func toMono(t time.Time) time.Duration { return monoNow() + time.Until(t) }

// fromMono returns the CLOCK_MONOTONIC reading m as a time.Time.
func fromMono(m time.Duration) time.Time { return time.Now().Add(m - monoNow()) }
