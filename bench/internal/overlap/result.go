package overlap

import (
	"slices"
	"time"
)

// Run is the outcome of one run. Times count from the fault's injection,
// on CLOCK_MONOTONIC.
type Run struct {
	ALast  time.Duration `json:"a_last_ns"`  // A's last append
	BFirst time.Duration `json:"b_first_ns"` // B's first append, when HasB
	HasB   bool          `json:"has_b"`      // B appended within the observation
	// AEnded: A's job ran to its own end (nothing stopped it).
	AEnded bool `json:"a_ended"`
	// ARunning: A's command was still running when the observation ended,
	// so its last append is a lower bound.
	ARunning bool `json:"a_running"`
	// AExit is the exit status of A's lock tool (monolock run, etcdctl):
	// -1 when it was killed or had not exited by the end of the run.
	AExit int `json:"a_exit"`
	// T is when A sent its last acknowledged heartbeat (t), for a tool
	// that speaks the monolock protocol (HasT): the instant its lease
	// counts from.
	T    time.Duration `json:"t_ns,omitempty"`
	HasT bool          `json:"has_t,omitempty"`
	// ASaid is the last line A's lock tool (or its command) wrote to
	// stdout or stderr, if any: how it explains its exit.
	ASaid    string        `json:"a_said,omitempty"`
	Observed time.Duration `json:"observed_ns"`
	// Err says why the run could not be set up (nothing was measured).
	Err string `json:"err,omitempty"`
}

// Overlap is A's last append minus B's first, and whether both happened.
func (r Run) Overlap() (time.Duration, bool) {
	if r.Err != "" || !r.HasB {
		return 0, false
	}
	return r.ALast - r.BFirst, true
}

// Summary is what the report prints for one cell (tool × variant × fault).
type Summary struct {
	Runs        int           `json:"runs"`        // runs asked for
	Measured    int           `json:"measured"`    // runs in which B appended: the overlaps below
	Overlapping int           `json:"overlapping"` // runs with A's last append after B's first
	Min         time.Duration `json:"min_ns"`
	Median      time.Duration `json:"median_ns"`
	Max         time.Duration `json:"max_ns"`
	// ALast and BFirst are the medians of A's last and B's first append
	// over the measured runs, from the fault.
	ALast   time.Duration `json:"a_last_median_ns"`
	BFirst  time.Duration `json:"b_first_median_ns"`
	Ended   int           `json:"a_ended"`   // runs whose A ran its whole job
	Running int           `json:"a_running"` // runs whose A still ran at the end
	NoB     int           `json:"no_b"`      // B never appended within the observation
	Failed  int           `json:"failed"`
	// Exits counts the lock tool's exit statuses of A (-1: killed, or not
	// exited by the end of the run).
	Exits    map[int]int `json:"a_exits,omitempty"`
	FirstErr string      `json:"first_error,omitempty"`
}

// Median of sorted xs; of an even count, the mean of the middle two.
func Median(xs []time.Duration) time.Duration {
	n := len(xs)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// Summarise computes a cell's summary.
func Summarise(runs []Run) Summary {
	s := Summary{Runs: len(runs)}
	var ov, al, bf []time.Duration
	for _, r := range runs {
		if r.Err != "" {
			s.Failed++
			if s.FirstErr == "" {
				s.FirstErr = r.Err
			}
			continue
		}
		if s.Exits == nil {
			s.Exits = map[int]int{}
		}
		s.Exits[r.AExit]++
		if r.AEnded {
			s.Ended++
		}
		if r.ARunning {
			s.Running++
		}
		o, ok := r.Overlap()
		if !ok {
			s.NoB++
			continue
		}
		ov, al, bf = append(ov, o), append(al, r.ALast), append(bf, r.BFirst)
		if o > 0 {
			s.Overlapping++
		}
	}
	s.Measured = len(ov)
	if len(ov) == 0 {
		return s
	}
	for _, xs := range [][]time.Duration{ov, al, bf} {
		slices.Sort(xs)
	}
	s.Min, s.Median, s.Max = ov[0], Median(ov), ov[len(ov)-1]
	s.ALast, s.BFirst = Median(al), Median(bf)
	return s
}

// MeetsTarget reports whether a cell meets monolock run's target: every
// run measured, and in every one A's last append at least gap × lease
// before B's first.
func (s Summary) MeetsTarget(lease time.Duration, gap float64) bool {
	return s.Runs > 0 && s.Measured == s.Runs && s.Max <= -time.Duration(gap*float64(lease))
}
