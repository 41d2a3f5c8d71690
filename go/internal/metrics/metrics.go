// Package metrics exports the lock server's state and events in the
// Prometheus format, with the official client library.
//
// Gauges (sessions, locks, holders, waiters) are read from the server when
// scraped, so they cost nothing between scrapes. Counters are resolved once,
// up front, so that counting an event never allocates; nothing at all is
// counted per heartbeat.
package metrics

import (
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/monolock/monolock/go/internal/server"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// Source is the server state read at scrape time; *server.Server has it.
type Source interface {
	Sessions() int
	HeldBack() int
	Counts() (locks, holders, waiters int)
}

// Metrics is a Prometheus registry with the server's metrics. It implements
// server.Observer.
type Metrics struct {
	reg *prometheus.Registry

	grants   prometheus.Counter
	expiries prometheus.Counter
	handoff  prometheus.Histogram
	errors   *prometheus.CounterVec
	byCode   [256]prometheus.Counter // pre-resolved for the known codes
	refused  *prometheus.CounterVec
	refusedN map[string]prometheus.Counter
	reloads  *prometheus.CounterVec
	tokenErr prometheus.Counter
	bursts   prometheus.Counter

	// Failures any peer can cause; their log lines are rate-limited.
	acceptErrs  prometheus.Counter
	tlsFailures prometheus.Counter
	heldBack    map[string]prometheus.Counter // by cause, pre-resolved
}

var (
	_ server.Observer      = (*Metrics)(nil)
	_ server.NoiseObserver = (*Metrics)(nil)
	_ server.HoldObserver  = (*Metrics)(nil)
)

// New returns the metrics; call SetSource before the first scrape so the
// gauges have something to read.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		grants: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "monolock_grants_total",
			Help: "Locks granted, each with a new fencing token: first grants and promotions.",
		}),
		bursts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "monolock_heartbeat_burst_extra_total",
			Help: "Heartbeats that arrived in one read behind another and were answered by that one reply. Compliant clients never send them.",
		}),
		tokenErr: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "monolock_token_reservation_failures_total",
			Help: "Failed attempts to make a block of fencing tokens durable (disk full, read-only, I/O error). While they fail, grants wait and /readyz answers 503.",
		}),
		expiries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "monolock_expiries_total",
			Help: "Sessions closed because their lease ran out without a heartbeat.",
		}),
		handoff: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "monolock_handoff_seconds",
			Help: "Time from a holder's end to the next waiter's promotion being sent (lock delay included).",
			// 50µs .. ~26s: loopback hand-overs are sub-millisecond, a
			// lock delay adds seconds.
			Buckets: prometheus.ExponentialBuckets(50e-6, 4, 10),
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "monolock_errors_total",
			Help: "ERROR messages sent to sessions, by protocol error code.",
		}, []string{"code"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "monolock_connections_refused_total",
			Help: "Connections closed before any reply because a connection limit was reached: max_sessions, per_address (the lock port), admin_max_connections (the admin API).",
		}, []string{"reason"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "monolock_config_reloads_total",
			Help: "Reloads of the ACL and TLS files on SIGHUP, by result.",
		}, []string{"result"}),
	}
	for code := range 256 {
		if protocol.CodeErr(uint8(code)) != nil {
			m.byCode[code] = m.errors.WithLabelValues(codeLabel(uint8(code)))
		}
	}
	m.refusedN = map[string]prometheus.Counter{
		server.RefusedMaxSessions: m.refused.WithLabelValues(server.RefusedMaxSessions),
		server.RefusedPerAddr:     m.refused.WithLabelValues(server.RefusedPerAddr),
		RefusedAdminConns:         m.refused.WithLabelValues(RefusedAdminConns),
	}
	m.reloads.WithLabelValues("ok")
	m.reloads.WithLabelValues("error")
	m.reg.MustRegister(m.grants, m.expiries, m.handoff, m.errors, m.refused, m.reloads, m.tokenErr, m.bursts,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.acceptErrs = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "monolock_accept_errors_total",
		Help: "Failed accepts on the lock port (out of file descriptors, ...). The server waits and retries; the log shows the first few per 10 s.",
	})
	m.tlsFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "monolock_tls_handshake_failures_total",
		Help: "Connections to the lock port that failed their TLS handshake: no acceptable client certificate, or not TLS. The log shows the first few per 10 s.",
	})
	m.reg.MustRegister(m.acceptErrs, m.tlsFailures)
	// The cause label takes the server's constants only: nothing a client
	// sends can add a series.
	held := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "monolock_locks_held_back_total",
		Help: "Locks kept from the next waiter after their holder ended without a release, by cause: reset (the holder's connection was reset; kept for the rest of its lease) or lock_delay (the holder went silent; --lock-delay). The log line is rate-limited; this counts every one.",
	}, []string{"cause"})
	m.heldBack = map[string]prometheus.Counter{
		server.HeldBackReset:     held.WithLabelValues(server.HeldBackReset),
		server.HeldBackLockDelay: held.WithLabelValues(server.HeldBackLockDelay),
	}
	m.reg.MustRegister(held)
	return m
}

func codeLabel(code uint8) string { return fmt.Sprintf("0x%02x", code) }

// SetSource registers the gauges that read src at scrape time. Call it once.
func (m *Metrics) SetSource(src Source) {
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	m.reg.MustRegister(
		gauge("monolock_sessions", "Open sessions (connections), including those not past their ACQUIRE.",
			func() float64 { return float64(src.Sessions()) }),
		gauge("monolock_held_back_holders", "Holders whose sessions are gone (reset, or silent under the lock delay) and whose claims keep their places, each counting as a session against the session limits.",
			func() float64 { return float64(src.HeldBack()) }),
		gauge("monolock_locks", "Lock names with a holder or waiters.",
			func() float64 { l, _, _ := src.Counts(); return float64(l) }),
		gauge("monolock_holders", "Locks currently held.",
			func() float64 { _, h, _ := src.Counts(); return float64(h) }),
		gauge("monolock_waiters", "Sessions queued for a lock.",
			func() float64 { _, _, w := src.Counts(); return float64(w) }),
	)
	if rw, ok := src.(interface{ RestartWait() time.Duration }); ok {
		m.reg.MustRegister(gauge("monolock_restart_wait_seconds",
			"How long a server restarted on a used data directory still waits out its previous run's leases before its first grant; /readyz answers 503 meanwhile.",
			func() float64 { return rw.RestartWait().Seconds() }))
	}
	cell, ok := src.(interface {
		Cell() (server.CellStatus, bool)
	})
	if !ok {
		return
	}
	if _, on := cell.Cell(); !on {
		return // not part of an HA cell
	}
	m.reg.MustRegister(
		gauge("monolock_ha_active", "1 while this server is the active (leader) server of its HA cell, else 0.",
			func() float64 {
				if st, _ := cell.Cell(); st.Role == "leader" {
					return 1
				}
				return 0
			}),
		gauge("monolock_ha_grace_remaining_seconds", "How long a new leader still waits out the previous leader's leases before its first grant.",
			func() float64 { st, _ := cell.Cell(); return st.Grace.Seconds() }),
	)
}

// SetMaxSessions exports the session limit (--max-sessions) as
// monolock_max_sessions, for alerts on monolock_sessions /
// monolock_max_sessions. With no limit (0) there is no gauge: a ratio to
// 0 would read as over the limit. Call it once.
func (m *Metrics) SetMaxSessions(limit int) {
	if limit <= 0 {
		return
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "monolock_max_sessions",
		Help: "The session limit (--max-sessions): connections beyond this many open sessions are refused. Not exported without a limit.",
	})
	g.Set(float64(limit))
	m.reg.MustRegister(g)
}

// Handler serves the metrics in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Registry returns the underlying registry (for tests and extra collectors).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Reloaded counts a reload of the configuration files.
func (m *Metrics) Reloaded(err error) {
	if err != nil {
		m.reloads.WithLabelValues("error").Inc()
		return
	}
	m.reloads.WithLabelValues("ok").Inc()
}

// Granted implements server.Observer.
func (m *Metrics) Granted() { m.grants.Inc() }

// Promoted implements server.Observer.
func (m *Metrics) Promoted(handoff time.Duration) {
	m.grants.Inc()
	m.handoff.Observe(handoff.Seconds())
}

// Expired implements server.Observer.
func (m *Metrics) Expired() { m.expiries.Inc() }

// ErrorSent implements server.Observer.
func (m *Metrics) ErrorSent(code uint8) {
	if c := m.byCode[code]; c != nil {
		c.Inc()
		return
	}
	m.errors.WithLabelValues(codeLabel(code)).Inc()
}

// HeartbeatBurst implements server.Observer.
func (m *Metrics) HeartbeatBurst(extra int) { m.bursts.Add(float64(extra)) }

// TokenReservationFailed implements server.Observer.
func (m *Metrics) TokenReservationFailed() { m.tokenErr.Inc() }

// AcceptFailed implements server.NoiseObserver.
func (m *Metrics) AcceptFailed() { m.acceptErrs.Inc() }

// TLSHandshakeFailed implements server.NoiseObserver.
func (m *Metrics) TLSHandshakeFailed() { m.tlsFailures.Inc() }

// HeldBack implements server.HoldObserver. An unknown cause is not
// counted: the label set stays fixed.
func (m *Metrics) HeldBack(cause string) {
	if c := m.heldBack[cause]; c != nil {
		c.Inc()
	}
}

// RefusedAdminConns is the reason of monolock_connections_refused_total
// for a connection to the admin API over --admin-max-connections.
const RefusedAdminConns = "admin_max_connections"

// AdminRefused counts a connection the admin API closed at its limit.
func (m *Metrics) AdminRefused() { m.refusedN[RefusedAdminConns].Inc() }

// Refused implements server.Observer.
func (m *Metrics) Refused(reason string) {
	if c := m.refusedN[reason]; c != nil {
		c.Inc()
	}
}

// Totals are the counters the admin dashboard shows, read from the same
// counters /metrics exports so the two never disagree.
type Totals struct {
	Grants   uint64 // monolock_grants_total
	Expiries uint64 // monolock_expiries_total
	Kicks    uint64 // monolock_errors_total{code="0x02"}
}

// Totals reads the counters now.
func (m *Metrics) Totals() Totals {
	return Totals{
		Grants:   counterValue(m.grants),
		Expiries: counterValue(m.expiries),
		Kicks:    counterValue(m.byCode[protocol.ErrAdminClosed.Code]),
	}
}

func counterValue(c prometheus.Counter) uint64 {
	var d dto.Metric
	if c == nil || c.Write(&d) != nil {
		return 0
	}
	return uint64(d.GetCounter().GetValue())
}
