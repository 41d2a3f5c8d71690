package heartbeat

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/testspec"
)

// ms converts a duration to float milliseconds for comparison with the vectors.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func TestScheduleMatchesVectors(t *testing.T) {
	var vec struct {
		Tolerance float64 `json:"tolerance_ms"`
		Cases     []struct {
			Desc    string  `json:"desc"`
			Lease   int64   `json:"lease_ms"`
			Base    float64 `json:"base_interval_ms"`
			Timeout float64 `json:"client_timeout_ms"`
			Initial float64 `json:"initial_interval_ms"`
			Steps   []struct {
				RTT      float64 `json:"rtt_ms"`
				SRTT     float64 `json:"srtt_ms"`
				Interval float64 `json:"interval_ms"`
			} `json:"steps"`
		} `json:"cases"`
	}
	testspec.Load(t, "vectors/heartbeat.json", &vec)
	require.NotEmpty(t, vec.Cases)
	// Durations are whole nanoseconds, so allow half a nanosecond of rounding
	// on top of the vectors' tolerance.
	tol := vec.Tolerance + 0.5e-6
	for _, c := range vec.Cases {
		t.Run(c.Desc, func(t *testing.T) {
			s := New(time.Duration(c.Lease) * time.Millisecond)
			require.InDelta(t, c.Base, ms(s.BaseInterval()), tol)
			require.InDelta(t, c.Timeout, ms(s.ClientTimeout()), tol)
			require.InDelta(t, c.Initial, ms(s.Interval()), tol)
			for i, st := range c.Steps {
				s.Observe(time.Duration(math.Round(st.RTT * float64(time.Millisecond))))
				require.InDelta(t, st.SRTT, ms(s.SRTT()), tol, "step %d srtt", i)
				require.InDelta(t, st.Interval, ms(s.Interval()), tol, "step %d interval", i)
			}
		})
	}
}

func TestConstantsMatchSpec(t *testing.T) {
	var c struct {
		Heartbeat struct {
			Base    float64 `json:"base_interval_factor"`
			Timeout float64 `json:"client_timeout_factor"`
			Alpha   float64 `json:"srtt_alpha"`
			Safe    float64 `json:"safe_rtt_factor"`
			MinMS   float64 `json:"min_interval_ms"`
		} `json:"heartbeat"`
	}
	testspec.Load(t, "constants.json", &c)
	require.Equal(t, c.Heartbeat.Base, BaseIntervalFactor)
	require.Equal(t, c.Heartbeat.Timeout, ClientTimeoutFactor)
	require.Equal(t, c.Heartbeat.Alpha, SRTTAlpha)
	require.Equal(t, c.Heartbeat.Safe, float64(SafeRTTFactor))
	require.Equal(t, c.Heartbeat.MinMS, ms(MinInterval))
	// New computes lease/4 and lease*4/5 with integers: pin that they are the factors.
	s := New(time.Second)
	require.Equal(t, time.Duration(BaseIntervalFactor*float64(time.Second)), s.BaseInterval())
	require.Equal(t, time.Duration(ClientTimeoutFactor*float64(time.Second)), s.ClientTimeout())
}

func TestNegativeSampleCountsAsZero(t *testing.T) {
	s := New(time.Second)
	s.Observe(-time.Millisecond)
	require.Equal(t, time.Duration(0), s.SRTT())
	require.Equal(t, s.BaseInterval(), s.Interval())
}
