// Package safety measures how much warning a lock recipe gives its holder
// before somebody else is granted the lock, when the holder's link fails.
//
// One run: a holder acquires a lock through a fault proxy, a competitor
// queues for the same lock on a direct link, a fault is injected on the
// holder's link, and two instants are taken on this process's monotonic
// clock: the holder being told it has lost the lock (its recipe's signal),
// and the competitor being granted. The margin is grant minus told; a
// negative margin means two processes believed they held the lock at once.
package safety

import (
	"slices"
	"time"
)

// Run is the outcome of one run. Times count from the fault's injection.
type Run struct {
	Told       time.Duration `json:"told_ns,omitempty"`
	HasTold    bool          `json:"has_told"`
	Granted    time.Duration `json:"granted_ns,omitempty"`
	HasGranted bool          `json:"has_granted"`
	// Observed is how long after the fault the run watched for the two
	// events; an event that did not come happened later, or never.
	Observed time.Duration `json:"observed_ns"`
	// Err says why the run could not be set up (nothing was measured).
	Err string `json:"err,omitempty"`
}

// Margin is the competitor's grant minus the holder's told time, and
// whether both happened within the observation.
func (r Run) Margin() (time.Duration, bool) {
	if r.Err != "" || !r.HasTold || !r.HasGranted {
		return 0, false
	}
	return r.Granted - r.Told, true
}

// Unsafe reports whether the competitor was granted the lock before the
// holder was told it had lost it, including a holder never told at all.
func (r Run) Unsafe() bool {
	if r.Err != "" || !r.HasGranted {
		return false
	}
	return !r.HasTold || r.Granted < r.Told
}

// Summary is what the report prints for one cell (recipe × fault).
type Summary struct {
	Runs     int           `json:"runs"`     // runs asked for
	Measured int           `json:"measured"` // runs with both events: the margins below
	Min      time.Duration `json:"min_ns"`
	Median   time.Duration `json:"median_ns"`
	Max      time.Duration `json:"max_ns"`
	Unsafe   int           `json:"unsafe"`      // grant before told, or grant and never told
	NotTold  int           `json:"not_told"`    // holder not told within the observation
	NoGrant  int           `json:"no_grant"`    // competitor not granted within the observation
	Failed   int           `json:"failed"`      // runs that could not be set up
	FirstErr string        `json:"first_error"` // the first setup error
	// UntoldBound is, over the unsafe runs whose holder was never told, the
	// largest grant-to-end-of-observation span: their holder was told at
	// least that long after the grant, if ever.
	UntoldBound time.Duration `json:"untold_bound_ns,omitempty"`
}

// Summarise computes a cell's summary; the median of an even number of
// margins is the mean of the two middle ones.
func Summarise(runs []Run) Summary {
	s := Summary{Runs: len(runs)}
	var ms []time.Duration
	for _, r := range runs {
		if r.Err != "" {
			s.Failed++
			if s.FirstErr == "" {
				s.FirstErr = r.Err
			}
			continue
		}
		if !r.HasTold {
			s.NotTold++
		}
		if !r.HasGranted {
			s.NoGrant++
		}
		if r.Unsafe() {
			s.Unsafe++
			if !r.HasTold {
				s.UntoldBound = max(s.UntoldBound, r.Observed-r.Granted)
			}
		}
		if m, ok := r.Margin(); ok {
			ms = append(ms, m)
		}
	}
	s.Measured = len(ms)
	if len(ms) == 0 {
		return s
	}
	slices.Sort(ms)
	s.Min, s.Max = ms[0], ms[len(ms)-1]
	if n := len(ms); n%2 == 1 {
		s.Median = ms[n/2]
	} else {
		s.Median = (ms[n/2-1] + ms[n/2]) / 2
	}
	return s
}

// MeetsTarget reports whether a cell meets the target for monolock: every
// run measured (told and granted), none unsafe, and the smallest margin at
// least frac × lease.
func (s Summary) MeetsTarget(lease time.Duration, frac float64) bool {
	return s.Runs > 0 && s.Measured == s.Runs && s.Unsafe == 0 &&
		s.Min >= time.Duration(frac*float64(lease))
}

// outcome makes a Run from the instants of one run, all read from the same
// monotonic clock: the fault, the holder told, the competitor granted (zero:
// did not happen) and the end of the observation.
func outcome(fault, told, granted, end time.Time) Run {
	r := Run{Observed: end.Sub(fault)}
	if !told.IsZero() {
		r.HasTold, r.Told = true, told.Sub(fault)
	}
	if !granted.IsZero() {
		r.HasGranted, r.Granted = true, granted.Sub(fault)
	}
	return r
}
