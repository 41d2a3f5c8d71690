package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/server"
)

type fakeSource struct{}

func (fakeSource) Sessions() int                         { return 5 }
func (fakeSource) HeldBack() int                         { return 6 }
func (fakeSource) Counts() (locks, holders, waiters int) { return 3, 2, 4 }

func TestEventsCountWithoutAllocating(t *testing.T) {
	m := New()
	m.SetSource(fakeSource{})
	allocs := testing.AllocsPerRun(100, func() {
		m.Granted()
		m.Promoted(time.Millisecond)
		m.Expired()
		m.ErrorSent(0x18)
		m.Refused(server.RefusedPerAddr)
	})
	assert.Zero(t, allocs, "counting events must not allocate")

	assert.Equal(t, 202.0, counter(t, m.grants))
	assert.Equal(t, 101.0, counter(t, m.expiries))
	assert.Equal(t, 101.0, counter(t, m.errors.WithLabelValues("0x18")))
	assert.Equal(t, 101.0, counter(t, m.refused.WithLabelValues(server.RefusedPerAddr)))
	m.ErrorSent(0xEE) // a code this version does not know still counts
	assert.Equal(t, 1.0, counter(t, m.errors.WithLabelValues("0xee")))

	gauges := gaugeValues(t, m)
	assert.Equal(t, 5.0, gauges["monolock_sessions"])
	assert.Equal(t, 6.0, gauges["monolock_held_back_holders"])
	assert.Equal(t, 3.0, gauges["monolock_locks"])
	assert.Equal(t, 2.0, gauges["monolock_holders"])
	assert.Equal(t, 4.0, gauges["monolock_waiters"])
}

// gaugeValues gathers m's label-free gauges by name.
func gaugeValues(t *testing.T, m *Metrics) map[string]float64 {
	t.Helper()
	fams, err := m.Registry().Gather()
	require.NoError(t, err)
	gauges := map[string]float64{}
	for _, f := range fams {
		if f.GetType() == dto.MetricType_GAUGE && len(f.GetMetric()) == 1 {
			gauges[f.GetName()] = f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return gauges
}

// restartingSource is a server that restarted on a used data directory.
type restartingSource struct {
	fakeSource
	wait time.Duration
}

func (s restartingSource) RestartWait() time.Duration { return s.wait }

// How long a restarted server still waits before its first grant is a
// gauge, read at scrape time.
func TestRestartWaitIsExported(t *testing.T) {
	m := New()
	m.SetSource(restartingSource{wait: 1500 * time.Millisecond})
	assert.Equal(t, 1.5, gaugeValues(t, m)["monolock_restart_wait_seconds"])

	plain := New()
	plain.SetSource(fakeSource{})
	assert.NotContains(t, gaugeValues(t, plain), "monolock_restart_wait_seconds", "a source that cannot restart has no such gauge")
}

func counter(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	return m.GetCounter().GetValue()
}

// The counters added for disk trouble and heartbeat bursts are exported.
func TestTokenFailuresAndBurstsAreExported(t *testing.T) {
	m := New()
	m.SetSource(fakeSource{})
	m.TokenReservationFailed()
	m.HeartbeatBurst(3)
	fams, err := m.Registry().Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, f := range fams {
		if f.GetType() == dto.MetricType_COUNTER && len(f.GetMetric()) == 1 {
			got[f.GetName()] = f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	assert.Equal(t, 1.0, got["monolock_token_reservation_failures_total"])
	assert.Equal(t, 3.0, got["monolock_heartbeat_burst_extra_total"])
}

// What a flood causes is counted in full, although its log lines are
// rate-limited; counting allocates nothing.
func TestFloodCountersAreExported(t *testing.T) {
	m := New()
	m.SetSource(fakeSource{})
	allocs := testing.AllocsPerRun(100, func() {
		m.AcceptFailed()
		m.TLSHandshakeFailed()
		m.TLSHandshakeFailed()
	})
	assert.Zero(t, allocs)
	fams, err := m.Registry().Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, f := range fams {
		if f.GetType() == dto.MetricType_COUNTER && len(f.GetMetric()) == 1 {
			got[f.GetName()] = f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	assert.Equal(t, 101.0, got["monolock_accept_errors_total"])
	assert.Equal(t, 202.0, got["monolock_tls_handshake_failures_total"])
}

// Held-back locks count by cause, from the server's constants only: a
// cause this version does not know adds no series. Both series exist
// from the start, so a rate() over them has a zero to begin from.
func TestHeldBackCountsByFixedCause(t *testing.T) {
	m := New()
	assert.Zero(t, counter(t, m.heldBack[server.HeldBackReset]))
	allocs := testing.AllocsPerRun(100, func() {
		m.HeldBack(server.HeldBackReset)
		m.HeldBack(server.HeldBackReset)
		m.HeldBack(server.HeldBackLockDelay)
	})
	assert.Zero(t, allocs)
	m.HeldBack("something a client sent")
	fams, err := m.Registry().Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, f := range fams {
		if f.GetName() == "monolock_locks_held_back_total" {
			for _, s := range f.GetMetric() {
				require.Len(t, s.GetLabel(), 1)
				got[s.GetLabel()[0].GetName()+"="+s.GetLabel()[0].GetValue()] = s.GetCounter().GetValue()
			}
		}
	}
	assert.Equal(t, map[string]float64{"cause=reset": 202, "cause=lock_delay": 101}, got)
}

// Totals reads the very counters /metrics exports.
func TestTotalsReadTheExportedCounters(t *testing.T) {
	m := New()
	m.SetSource(fakeSource{})
	assert.Equal(t, Totals{}, m.Totals())
	m.Granted()
	m.Promoted(time.Millisecond)
	m.Expired()
	m.ErrorSent(0x02)
	m.ErrorSent(0x01) // a shutdown, not a kick
	assert.Equal(t, Totals{Grants: 2, Expiries: 1, Kicks: 1}, m.Totals())
}

// monolock_max_sessions is --max-sessions, so that monolock_sessions /
// monolock_max_sessions is how near the limit a server is; without a
// limit it is not exported (a ratio to 0 would read as over it).
func TestMaxSessionsGauge(t *testing.T) {
	m := New()
	m.SetSource(fakeSource{})
	m.SetMaxSessions(19936)
	assert.Equal(t, 19936.0, gaugeValues(t, m)["monolock_max_sessions"])

	m = New()
	m.SetSource(fakeSource{})
	m.SetMaxSessions(0)
	assert.NotContains(t, gaugeValues(t, m), "monolock_max_sessions")
}
