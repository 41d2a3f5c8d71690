// Package overlap measures whether two commands that take the same lock in
// turn ever work at the same time, when the first one's link fails.
//
// One run: a command A holds the lock through a lock tool (`monolock run`,
// `etcdctl lock`) whose server connection goes through the fault proxy of
// the safety workload, and appends a timestamp to a file every few ms; a
// command B waits for the same lock through the same tool on a direct link
// and starts appending to a file of its own when it gets the lock. One of
// the safety workload's five faults then hits A's link. The overlap is A's
// last append minus B's first: positive, both worked at once; negative, B
// started that long after A stopped.
//
// The appender is `bench append` (AppendMain); every timestamp, its own and
// the fault's, is CLOCK_MONOTONIC, one clock for every process of the
// machine.
package overlap

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Now is CLOCK_MONOTONIC in ns: the clock of every append and of the fault.
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("clock_gettime(CLOCK_MONOTONIC): " + err.Error())
	}
	return ts.Nano()
}

// A file of appends is lines, each ended by a newline:
//
//	# pid 4711            written first by every `bench append` process
//	8123456789012         one append: CLOCK_MONOTONIC in ns
//	...
//	# end                 the job ran to its end (not written when it was killed)
//
// A last line without its newline is an append cut short and is ignored.
const (
	pidPrefix = "# pid "
	endLine   = "# end"
)

// Appends is what one file says.
type Appends struct {
	N           int   // appends
	First, Last int64 // the earliest and the latest append (ns); 0 when N is 0
	Ended       bool  // the job ran to its own end
	PIDs        []int // the processes that wrote to the file
}

// Parse reads a file of appends.
func Parse(b []byte) (Appends, error) {
	var a Appends
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			break // cut short: not a complete append
		}
		line := b[:i]
		b = b[i+1:]
		switch {
		case len(line) == 0:
		case bytes.Equal(line, []byte(endLine)):
			a.Ended = true
		case bytes.HasPrefix(line, []byte(pidPrefix)):
			pid, err := strconv.Atoi(string(bytes.Fields(line[len(pidPrefix):])[0]))
			if err != nil {
				return a, fmt.Errorf("bad pid line %q", line)
			}
			a.PIDs = append(a.PIDs, pid)
		case line[0] == '#':
		default:
			t, err := strconv.ParseInt(string(line), 10, 64)
			if err != nil {
				return a, fmt.Errorf("bad append %q", line)
			}
			if a.N == 0 || t < a.First {
				a.First = t
			}
			if a.N == 0 || t > a.Last {
				a.Last = t
			}
			a.N++
		}
	}
	return a, nil
}

// ErrNoAppend is Overlap's error when a file holds no append.
var ErrNoAppend = errors.New("no append")

// Overlap is A's last append minus B's first, from the two files'
// contents: positive when A still worked after B had started, negative
// when B started that long after A's last append.
func Overlap(a, b []byte) (time.Duration, error) {
	pa, err := Parse(a)
	if err != nil {
		return 0, fmt.Errorf("A: %w", err)
	}
	pb, err := Parse(b)
	if err != nil {
		return 0, fmt.Errorf("B: %w", err)
	}
	if pa.N == 0 {
		return 0, fmt.Errorf("A: %w", ErrNoAppend)
	}
	if pb.N == 0 {
		return 0, fmt.Errorf("B: %w", ErrNoAppend)
	}
	return time.Duration(pa.Last - pb.First), nil
}
