package report

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/monolock/monolock/bench/internal/systems"
)

// tlsTargets are the targets of TLS: a claim on a session over TLS at
// least 0.8× a claim on a plain session, at every worker count.
var tlsTargets = []floorTarget{
	{systems.MonolockSessionTLS, 0.8, "with a session over TLS ≥ 0.8× a plain session (uncontended cycles/s, every worker count)"},
}

// writeTLSTargets prints the TLS targets, each against the plain session
// of the same run at the same worker count.
func writeTLSTargets(b *bytes.Buffer, r *Results) {
	writeTargetsAgainst(b, r, systems.MonolockSession, "plain session", tlsTargets)
}

// hasTLS reports whether the run measured a TLS system.
func hasTLS(r *Results) bool {
	return slices.ContainsFunc(r.Throughput, func(c ThroughputCell) bool { return systems.TLS(c.System) })
}

// writeTLS prints the TLS part of section 1: each TLS system beside its
// plain twin, and resumption's gain for a claim on a connection of its
// own, at every worker count.
func writeTLS(b *bytes.Buffer, r *Results) {
	if !hasTLS(r) {
		return
	}
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("### Over TLS\n\n")
	p("The same cycles against a `monolock serve` started with `--tls-cert` and `--tls-key` (an ECDSA P-256 certificate for 127.0.0.1 from `monolock certs`; TLS 1.3). ")
	p("A single claim is a connection, so it pays a handshake: with *resumption on* (the Go client's default session cache) a claim's connection resumes the TLS session of an earlier one, with *resumption off* (`SessionTicketsDisabled`) every claim pays a full handshake with its certificate check. ")
	p("A session pays one handshake for all its claims. Every ratio below compares cells of this run at the same worker count.\n\n")
	p("| workers | plain claim | TLS, resumed | TLS, full handshake | resumed ÷ full | resumed ÷ plain | plain session | TLS session | TLS session ÷ plain session |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	rate := func(sys string, w int) float64 { return findThroughput(r, sys, w).Stats.PerSec }
	cell := func(v float64) string {
		if v <= 0 {
			return "–"
		}
		return num(v)
	}
	for _, w := range workerCounts(r) {
		plain, res, full := rate(systems.Monolock, w), rate(systems.MonolockTLS, w), rate(systems.MonolockTLSNoResume, w)
		sess, sessTLS := rate(systems.MonolockSession, w), rate(systems.MonolockSessionTLS, w)
		if res <= 0 && full <= 0 && sessTLS <= 0 {
			continue
		}
		p("| %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", w, cell(plain), cell(res), cell(full), ratio(res, full), ratio(res, plain),
			cell(sess), cell(sessTLS), ratio(sessTLS, sess))
	}
	p("\n")
}
