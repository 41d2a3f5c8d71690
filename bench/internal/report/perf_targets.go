package report

import (
	"bytes"
	"fmt"
	"math"
	"strings"

	"github.com/monolock/monolock/bench/internal/systems"
)

// The performance issue's targets: handoff against PostgreSQL's, the
// clients against each other, and the cost of idle sessions, each from
// figures of the same run.

// writeHandoffVsPostgres prints the target that sys's contended handoff
// p50 and p99 are at or below PostgreSQL's (label names what is held to
// it).
func writeHandoffVsPostgres(b *bytes.Buffer, r *Results, sys, label string) {
	m, okM := findHandoff(r, sys)
	pg, okP := findHandoff(r, systems.Postgres)
	if !okM || !okP || m.Result.Latency.Count == 0 || pg.Result.Latency.Count == 0 {
		return
	}
	ml, pl := m.Result.Latency, pg.Result.Latency
	var missed []string
	if ml.P50 > pl.P50 {
		missed = append(missed, "p50")
	}
	if ml.P99 > pl.P99 {
		missed = append(missed, "p99")
	}
	v := "met"
	if len(missed) > 0 {
		v = "**missed** at " + strings.Join(missed, ", ")
	}
	fmt.Fprintf(b, "| %s p50 and p99 ≤ postgres's | p50: %s %s, postgres %s (%s); p99: %s %s, postgres %s (%s) | %s |\n", label,
		sys, dur(ml.P50), dur(pl.P50), ratio(float64(ml.P50), float64(pl.P50)), sys, dur(ml.P99), dur(pl.P99), ratio(float64(ml.P99), float64(pl.P99)), v)
}

// clientCells are the workload-5 cells the client targets compare.
var clientCells = []struct {
	workload string
	workers  int
	label    string
}{
	{"uncontended", 1, "1 worker"},
	{"uncontended", 16, "16 workers"},
	{"handoff", 16, "handoff"},
}

// writeClientTargets prints the client targets: Python sync gains from
// threads, and Node and Rust keep up with Go on the same cells.
func writeClientTargets(b *bytes.Buffer, r *Results) {
	p1, ok1 := findClient(r, "python-sync", "uncontended", 1)
	p16, ok16 := findClient(r, "python-sync", "uncontended", 16)
	if ok1 && ok16 && p1.Stats.PerSec > 0 {
		x := p16.Stats.PerSec / p1.Stats.PerSec
		fmt.Fprintf(b, "| python-sync at 16 threads ≥ 2× its 1-thread rate | %s vs %s cycles/s (%s) | %s |\n",
			num(p16.Stats.PerSec), num(p1.Stats.PerSec), ratioDown(x), verdict(roundDown(x, 2) >= 2))
	}
	for _, name := range []string{"node", "rust-blocking", "rust-tokio"} {
		var parts, missed []string
		for _, c := range clientCells {
			g, okG := findClient(r, "go", c.workload, c.workers)
			o, okO := findClient(r, name, c.workload, c.workers)
			if !okG || !okO || g.Stats.PerSec == 0 {
				continue
			}
			x := o.Stats.PerSec / g.Stats.PerSec
			parts = append(parts, fmt.Sprintf("%s %s", c.label, ratioDown(x)))
			if roundDown(x, 2) < 0.8 {
				missed = append(missed, c.label)
			}
		}
		if len(parts) == 0 {
			continue
		}
		v := "met"
		if len(missed) > 0 {
			v = "**missed** at " + strings.Join(missed, ", ")
		}
		fmt.Fprintf(b, "| %s ≥ 0.8× the go client (per second, same cells) | %s | %s |\n", name, strings.Join(parts, "; "), v)
	}
}

// roundDown rounds a ratio down to the decimal places it is printed with,
// so that a ratio printed as the target meets it.
func roundDown(x float64, places int) float64 {
	scale := math.Pow10(places)
	return math.Floor(x*scale+1e-9) / scale
}

func ratioDown(x float64) string { return fmt.Sprintf("%.2f×", roundDown(x, 2)) }

// idleFit is a least-squares line through the idle sessions measured:
// server memory growth and heartbeat CPU against the session count.
type idleFit struct {
	points                   int
	memA, memB               float64 // bytes = memA + memB × sessions
	cpuA, cpuB               float64 // cores = cpuA + cpuB × sessions
	minSessions, maxSessions int
}

func fitIdle(cells []IdleCell) (idleFit, bool) {
	var ns, mem, cpu []float64
	f := idleFit{minSessions: math.MaxInt}
	for _, c := range cells {
		x := c.Result
		if c.System != systems.Monolock || x.Established == 0 || x.Established < x.Holders {
			continue
		}
		ns = append(ns, float64(x.Established))
		mem = append(mem, x.BytesPerHolder*float64(x.Established))
		cpu = append(cpu, x.CPUCores)
		f.minSessions, f.maxSessions = min(f.minSessions, x.Established), max(f.maxSessions, x.Established)
	}
	f.points = len(ns)
	if f.points < 2 || f.minSessions == f.maxSessions {
		return f, false
	}
	f.memA, f.memB = leastSquares(ns, mem)
	f.cpuA, f.cpuB = leastSquares(ns, cpu)
	return f, true
}

// leastSquares returns a and b of the line y = a + b·x closest to the
// points.
func leastSquares(xs, ys []float64) (a, b float64) {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	b = (n*sxy - sx*sy) / (n*sxx - sx*sx)
	a = (sy - b*sx) / n
	return a, b
}

// writeIdleTargets prints the idle-session targets: memory per session
// under 4 KiB (the line's slope, which leaves out the process's fixed
// growth, and the plain average at the largest size), heartbeats of 19k
// sessions under 0.05 of a core, and the line through every measured size
// carried to 100k.
func writeIdleTargets(b *bytes.Buffer, r *Results) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	var sizes []string
	var largest, at19k *IdleCell
	for i, c := range r.Idle {
		x := c.Result
		if c.System != systems.Monolock || x.Established == 0 {
			continue
		}
		sizes = append(sizes, fmt.Sprintf("%s at %dk", kib(x.BytesPerHolder), x.Established/1000))
		if largest == nil || x.Established > largest.Result.Established {
			largest = &r.Idle[i]
		}
		if x.Established >= 19000 && (at19k == nil || x.Established < at19k.Result.Established) {
			at19k = &r.Idle[i]
		}
	}
	f, fitted := fitIdle(r.Idle)
	if largest != nil {
		avg := largest.Result.BytesPerHolder
		if fitted {
			p("| server memory per idle session under 4 KiB | %s per session added (slope over %dk–%dk); growth ÷ sessions: %s | %s |\n",
				kib(f.memB), f.minSessions/1000, f.maxSessions/1000, strings.Join(sizes, ", "), verdict(f.memB < 4096 && avg < 4096))
		} else {
			p("| server memory per idle session under 4 KiB | growth ÷ sessions: %s | %s |\n", strings.Join(sizes, ", "), verdict(avg < 4096))
		}
	}
	if at19k != nil {
		x := at19k.Result
		p("| heartbeats of 19k idle sessions under 0.05 of a core | %.3f cores at %d sessions (%.0f heartbeats/s) | %s |\n",
			x.CPUCores, x.Established, float64(x.Refreshes)/x.Window.Seconds(), verdict(x.CPUCores < 0.05))
	}
	if fitted {
		const n = 100000
		perSession := (f.memA + f.memB*n) / n
		cores := f.cpuA + f.cpuB*n
		p("| 100k idle sessions: measured sizes and a straight line through them | least squares over %d sizes (%dk–%dk): memory %.1f MiB + %s per session, heartbeat CPU %.3f + %.2f cores per 100k sessions; at 100k: %s per session, %.2f cores (extrapolated, not measured) | %s |\n",
			f.points, f.minSessions/1000, f.maxSessions/1000, f.memA/(1<<20), kib(f.memB), f.cpuA, f.cpuB*n, kib(perSession), cores,
			extrapolationVerdict(perSession < 4096, cores < 0.5))
	}
}

func extrapolationVerdict(memOK, cpuOK bool) string {
	switch {
	case memOK && cpuOK:
		return "extrapolation under 4 KiB and half a core"
	case memOK:
		return "extrapolation under 4 KiB; **over** half a core"
	case cpuOK:
		return "extrapolation **over** 4 KiB; under half a core"
	}
	return "extrapolation **over** 4 KiB and half a core"
}
