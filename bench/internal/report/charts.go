package report

import (
	"fmt"
	"image/color"
	"path/filepath"
	"slices"
	"time"

	"github.com/monolock/monolock/bench/internal/systems"
)

// The report says what every chart shows (BarChart, DotChart) and a
// Drawer draws it; package charts is the Drawer of the benchmark, on
// gonum/plot, so this package links no plotting library.

// Drawer draws the report's charts, each into the file at path.
type Drawer interface {
	DrawBars(path string, c BarChart) error
	DrawDots(path string, c DotChart) error
}

// Series is one bar series of a grouped bar chart.
type Series struct {
	Label  string
	Values []float64
}

// BarChart is groups of bars: one group per category, one bar per series.
// With LogY the Y axis is logarithmic, for figures that span orders of
// magnitude across systems. HLine, when above 0, is a dashed horizontal
// line at that value, named HLabel in the legend.
type BarChart struct {
	Title, YLabel string
	Categories    []string
	Series        []Series
	LogY          bool
	HLine         float64
	HLabel        string
}

// RunPoint is one run on a dot chart: its x, and whether it is marked (a
// bound or off the scale, not a measurement), which draws a triangle on it.
type RunPoint struct {
	X      float64
	Marked bool
}

// Tick is one labelled mark on an axis.
type Tick struct {
	Value float64
	Label string
}

// Line is a vertical line across every row of a dot chart, named Label in
// the legend unless Label is empty.
type Line struct {
	X      float64
	Color  color.Color
	Dashed bool
	Label  string
}

// DotChart is every run of a fault measurement: one row per Rows entry
// (the first on top), one colour per fault, the runs of row i and fault j
// as the points Points[i][j], slightly apart per fault, and a black
// triangle over every marked one, named MarkLabel in the legend.
type DotChart struct {
	Title string
	// TitlePadding is the space under the title in points; 0 is the default.
	TitlePadding float64
	XLabel       string
	XMin, XMax   float64
	// Ticks labels the X axis between its min and max.
	Ticks     func(min, max float64) []Tick
	Rows      []string
	Faults    []string
	Points    [][][]RunPoint
	MarkLabel string
	Lines     []Line
	// LegendRows is how many rows of room the legend gets above the top row.
	LegendRows int
}

// dotPoints gives the points of every row and fault: points(i, j) are
// those of row i and fault j.
func dotPoints(rows, faults int, points func(i, j int) []RunPoint) [][][]RunPoint {
	out := make([][][]RunPoint, rows)
	for i := range out {
		out[i] = make([][]RunPoint, faults)
		for j := range out[i] {
			out[i][j] = points(i, j)
		}
	}
	return out
}

func workersLabel(n int) string {
	if n == 1 {
		return "1 worker"
	}
	return fmt.Sprintf("%d workers", n)
}

// chartLabel names a system under the throughput charts' bars, short
// enough to sit beside the others.
func chartLabel(sys string) string {
	switch sys {
	case systems.Floor:
		return "tcp floor"
	case systems.MonolockBare:
		return "monolock, bare"
	case systems.Monolock:
		return "monolock, Go"
	case systems.MonolockBefore:
		return "monolock, before"
	case systems.SessionFloor:
		return "session floor"
	case systems.MonolockSessionBare:
		return "session, bare"
	case systems.MonolockSession:
		return "session, Go"
	case systems.MonolockTLS:
		return "TLS, resumed"
	case systems.MonolockTLSNoResume:
		return "TLS, full"
	case systems.MonolockSessionTLS:
		return "session, TLS"
	}
	return sys
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// writeCharts draws every chart of the report into dir and returns their
// file names by key.
func writeCharts(dir string, r *Results, d Drawer) (map[string]string, error) {
	out := map[string]string{}
	bars := func(file string, c BarChart) error { return d.DrawBars(filepath.Join(dir, file), c) }
	systems := systemOrder(r)
	add := func(key, file string, err error) error {
		if err != nil {
			return fmt.Errorf("chart %s: %w", file, err)
		}
		out[key] = file
		return nil
	}

	// 1. throughput: one group per system, one bar per worker count.
	if len(r.Throughput) > 0 {
		var ss, lat []Series
		for _, w := range workerCounts(r) {
			s := Series{Label: workersLabel(w)}
			l := Series{Label: "p99, " + workersLabel(w)}
			for _, sys := range systems {
				c := findThroughput(r, sys, w)
				s.Values = append(s.Values, c.Stats.PerSec)
				l.Values = append(l.Values, ms(c.Stats.P99))
			}
			ss, lat = append(ss, s), append(lat, l)
		}
		var cats []string
		for _, sys := range systems {
			cats = append(cats, chartLabel(sys))
		}
		if err := add("throughput", "throughput.png", bars("throughput.png", BarChart{Title: "Uncontended acquire+release cycles per second", YLabel: "cycles/s (log)", Categories: cats, Series: ss, LogY: true})); err != nil {
			return nil, err
		}
		if err := add("throughput-latency", "throughput-latency.png", bars("throughput-latency.png", BarChart{Title: "Uncontended cycle latency, p99", YLabel: "ms (log)", Categories: cats, Series: lat, LogY: true})); err != nil {
			return nil, err
		}
	}
	// 2. handoff latency p50/p99 per system.
	if len(r.Handoff) > 0 {
		p50 := Series{Label: "p50"}
		p99 := Series{Label: "p99"}
		var cats []string
		for _, c := range r.Handoff {
			cats = append(cats, c.System)
			p50.Values = append(p50.Values, ms(c.Result.Latency.P50))
			p99.Values = append(p99.Values, ms(c.Result.Latency.P99))
		}
		if err := add("handoff", "handoff.png", bars("handoff.png", BarChart{Title: fmt.Sprintf("Handoff latency, %d workers on one lock", r.Handoff[0].Workers), YLabel: "ms (log)", Categories: cats, Series: []Series{p50, p99}, LogY: true})); err != nil {
			return nil, err
		}
	}
	// 3. idle memory per holder, one group per system, one bar per count.
	if len(r.Idle) > 0 {
		counts := idleCounts(r)
		var systems []string // those measured here: not the throughput-only ones
		for _, c := range r.Idle {
			if !slices.Contains(systems, c.System) {
				systems = append(systems, c.System)
			}
		}
		var mem, cpu []Series
		for _, n := range counts {
			m := Series{Label: fmt.Sprintf("%d holders", n)}
			c := Series{Label: fmt.Sprintf("%d holders", n)}
			for _, sys := range systems {
				cell := findIdle(r, sys, n)
				m.Values = append(m.Values, cell.Result.BytesPerHolder/1024)
				c.Values = append(c.Values, cell.Result.CPUCores)
			}
			mem, cpu = append(mem, m), append(cpu, c)
		}
		if err := add("idle-memory", "idle-memory.png", bars("idle-memory.png", BarChart{Title: "Server memory per idle holder (10 s lease)", YLabel: "KiB per holder (log)", Categories: systems, Series: mem, LogY: true, HLine: 8, HLabel: "target: 8 KiB"})); err != nil {
			return nil, err
		}
		if err := add("idle-cpu", "idle-cpu.png", bars("idle-cpu.png", BarChart{Title: "Server CPU spent keeping idle holders alive", YLabel: "cores", Categories: systems, Series: cpu, HLine: 0.5, HLabel: "target: 0.5 core"})); err != nil {
			return nil, err
		}
	}
	// 4. dead-holder detection, median and worst, against the lease.
	if len(r.Dead) > 0 {
		med := Series{Label: "median"}
		worst := Series{Label: "worst"}
		var cats []string
		for _, c := range r.Dead {
			cats = append(cats, c.System)
			m, w := deadFigures(c.Result)
			med.Values = append(med.Values, ms(m))
			worst.Values = append(worst.Values, ms(w))
		}
		lease := ms(r.Dead[0].Result.Lease)
		if err := add("dead", "dead-holder.png", bars("dead-holder.png", BarChart{Title: "Frozen holder: freeze to grant of the waiter", YLabel: "ms", Categories: cats, Series: []Series{med, worst}, HLine: lease, HLabel: "lease / TTL"})); err != nil {
			return nil, err
		}
	}
	// 5. clients: uncontended cycles/s at 1 and 16 workers.
	if len(r.Clients) > 0 {
		names := clientOrder(r)
		var ss []Series
		for _, w := range []int{1, 16} {
			s := Series{Label: workersLabel(w)}
			for _, n := range names {
				c, _ := findClient(r, n, "uncontended", w)
				s.Values = append(s.Values, c.Stats.PerSec)
			}
			ss = append(ss, s)
		}
		h := Series{Label: "handoffs/s, 16 workers"}
		for _, n := range names {
			c, _ := findClient(r, n, "handoff", 16)
			h.Values = append(h.Values, c.Stats.PerSec)
		}
		ss = append(ss, h)
		if err := add("clients", "clients.png", bars("clients.png", BarChart{Title: "Clients through their conformance drivers", YLabel: "per second (log)", Categories: names, Series: ss, LogY: true})); err != nil {
			return nil, err
		}
	}
	// 6. safety margin of every run.
	if len(r.Safety) > 0 && r.SafetyRun != nil {
		if err := add("safety", "safety-margin.png", d.DrawDots(filepath.Join(dir, "safety-margin.png"), safetyChart(r))); err != nil {
			return nil, err
		}
	}
	// 8. work overlap of every run.
	if len(r.Overlap) > 0 && r.OverlapRun != nil {
		if err := add("overlap", "work-overlap.png", d.DrawDots(filepath.Join(dir, "work-overlap.png"), overlapChart(r))); err != nil {
			return nil, err
		}
	}
	return out, nil
}
