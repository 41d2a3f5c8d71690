package election

import (
	"slices"
	"time"

	"github.com/monolock/monolock/bench/internal/stats"
)

// System is everything measured for one recipe, as written to results.json.
type System struct {
	System string     `json:"system"`
	Resign []Handover `json:"resign"` // scenario 1
	Crash  []Handover `json:"crash"`  // scenario 2
	Watch  Delivery   `json:"watch"`  // scenario 3
	Split  []Split    `json:"split"`  // scenario 4
}

// Handover is one run of the resign or the crash scenario, timed from the
// leader's Resign call or from the fault on its link.
type Handover struct {
	Elected time.Duration `json:"elected_ns"`  // until the next candidate's Campaign returned
	AllKnow time.Duration `json:"all_know_ns"` // until the last follower reported the new leader
	Knowing int           `json:"knowing"`     // followers that reported it in time
	Err     string        `json:"err,omitempty"`
}

// Delivery is the watch scenario: every follower's delay to see each
// value the leader proclaimed, from the start of its Proclaim call.
type Delivery struct {
	Proclaims int           `json:"proclaims"`
	Followers int           `json:"followers"`
	Latency   stats.Summary `json:"latency"` // one sample per value and follower
	Call      stats.Summary `json:"call"`    // the Proclaim calls themselves
	Missed    int           `json:"missed"`  // values a follower never reported
	Err       string        `json:"err,omitempty"`
}

// Split is one run of the split-brain scenario, timed from the blackhole
// of leader A's link.
type Split struct {
	HasLost    bool          `json:"has_lost"` // A's loss signal fired within the window
	Lost       time.Duration `json:"lost_ns"`
	HasElected bool          `json:"has_elected"` // B's Campaign returned within the window
	Elected    time.Duration `json:"elected_ns"`
	Err        string        `json:"err,omitempty"`
}

// Window is A's loss minus B's election: positive while both believed
// they led. ok is false unless both happened.
func (s Split) Window() (w time.Duration, ok bool) {
	if !s.HasLost || !s.HasElected {
		return 0, false
	}
	return s.Lost - s.Elected, true
}

// Overlapped says whether both believed they led at once: B was elected
// before A was told, or A was never told.
func (s Split) Overlapped() bool {
	w, ok := s.Window()
	return s.HasElected && (!s.HasLost || ok && w > 0)
}

// Spread is the median, p99 and max of some runs' figures.
type Spread struct {
	N                int
	Median, P99, Max time.Duration
}

// SpreadOf summarises xs (sorted in place).
func SpreadOf(xs []time.Duration) Spread {
	if len(xs) == 0 {
		return Spread{}
	}
	slices.Sort(xs)
	return Spread{N: len(xs), Median: stats.Percentile(xs, 50), P99: stats.Percentile(xs, 99), Max: xs[len(xs)-1]}
}

// HandoverSummary is a scenario's handovers in figures.
type HandoverSummary struct {
	Runs, Failed     int
	FirstErr         string
	Elected, AllKnow Spread // over the runs that did not fail
}

// SummariseHandovers summarises the runs of one scenario and system.
func SummariseHandovers(runs []Handover) HandoverSummary {
	s := HandoverSummary{Runs: len(runs)}
	var elected, all []time.Duration
	for _, r := range runs {
		if r.Err != "" {
			s.Failed++
			if s.FirstErr == "" {
				s.FirstErr = r.Err
			}
			continue
		}
		elected, all = append(elected, r.Elected), append(all, r.AllKnow)
	}
	s.Elected, s.AllKnow = SpreadOf(elected), SpreadOf(all)
	return s
}

// SplitSummary is the split-brain scenario in figures.
type SplitSummary struct {
	Runs, Measured, Overlapping, NotTold, NotElected, Failed int
	FirstErr                                                 string
	Min, Median, Max                                         time.Duration // of the windows measured
	Lost, Elected                                            Spread        // of the events that happened
}

// SummariseSplits summarises the runs of one system.
func SummariseSplits(runs []Split) SplitSummary {
	s := SplitSummary{Runs: len(runs)}
	var windows, lost, elected []time.Duration
	for _, r := range runs {
		if r.Err != "" {
			s.Failed++
			if s.FirstErr == "" {
				s.FirstErr = r.Err
			}
			continue
		}
		if r.Overlapped() {
			s.Overlapping++
		}
		if r.HasLost {
			lost = append(lost, r.Lost)
		} else {
			s.NotTold++
		}
		if r.HasElected {
			elected = append(elected, r.Elected)
		} else {
			s.NotElected++
		}
		if w, ok := r.Window(); ok {
			windows = append(windows, w)
		}
	}
	s.Measured = len(windows)
	if w := SpreadOf(windows); w.N > 0 {
		s.Min, s.Median, s.Max = windows[0], w.Median, w.Max
	}
	s.Lost, s.Elected = SpreadOf(lost), SpreadOf(elected)
	return s
}
