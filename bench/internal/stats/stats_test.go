package stats

import (
	"testing"
	"time"
)

func TestPercentileNearestRank(t *testing.T) {
	var s []time.Duration
	for i := 1; i <= 100; i++ {
		s = append(s, time.Duration(i))
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 50}, {99, 99}, {100, 100}, {1, 1}, {0, 1}} {
		if got := Percentile(s, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
}

func TestSummarise(t *testing.T) {
	s := Summarise([]time.Duration{3, 1, 2}, time.Second, 1)
	if s.Count != 3 || s.PerSec != 3 || s.P50 != 2 || s.Max != 3 || s.Errors != 1 {
		t.Fatalf("summary %+v", s)
	}
	if z := Summarise(nil, 0, 0); z.PerSec != 0 || z.P99 != 0 {
		t.Fatalf("empty summary %+v", z)
	}
}
