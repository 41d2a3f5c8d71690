// Package stats summarises latency samples into the figures the report
// prints: count, rate and percentiles.
package stats

import (
	"slices"
	"time"
)

// Summary is what one measured cell reports.
type Summary struct {
	Count   int           `json:"count"`
	Elapsed time.Duration `json:"elapsed_ns"`
	PerSec  float64       `json:"per_sec"`
	P50     time.Duration `json:"p50_ns"`
	P99     time.Duration `json:"p99_ns"`
	Max     time.Duration `json:"max_ns"`
	Errors  int           `json:"errors"`
}

// Summarise sorts samples in place and computes the summary over elapsed.
func Summarise(samples []time.Duration, elapsed time.Duration, errors int) Summary {
	s := Summary{Count: len(samples), Elapsed: elapsed, Errors: errors}
	if elapsed > 0 {
		s.PerSec = float64(len(samples)) / elapsed.Seconds()
	}
	if len(samples) == 0 {
		return s
	}
	slices.Sort(samples)
	s.P50 = Percentile(samples, 50)
	s.P99 = Percentile(samples, 99)
	s.Max = samples[len(samples)-1]
	return s
}

// Percentile returns the nearest-rank p-th percentile of sorted samples.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(p/100*float64(len(sorted))+0.999999) - 1
	rank = max(0, min(rank, len(sorted)-1))
	return sorted[rank]
}
