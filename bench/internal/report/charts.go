package report

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"slices"
	"time"

	benchsystems "github.com/monolock/monolock/bench/internal/systems"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// series is one bar series of a grouped bar chart.
type series struct {
	label  string
	values []float64
}

// barChart draws groups of bars (one group per category, one bar per
// series) into path. With logY the Y axis is logarithmic: for figures that
// span orders of magnitude across systems.
func barChart(path, title, ylabel string, categories []string, ss []series, logY bool, hline float64, hlabel string) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	// Top right, pulled inside the canvas: at the very edge gonum clips the
	// legend's swatches.
	p.Legend.Top = true
	p.Legend.XOffs = -vg.Points(12)
	p.Legend.YOffs = -vg.Points(4)
	p.Legend.Padding = vg.Points(2)
	w := vg.Points(float64(60) / float64(max(1, len(ss))))
	floor := 0.0
	if logY {
		floor = math.Inf(1)
		for _, s := range ss {
			for _, v := range s.values {
				if v > 0 && v < floor {
					floor = v
				}
			}
		}
		if math.IsInf(floor, 1) {
			floor = 1
		}
		floor = math.Pow(10, math.Floor(math.Log10(floor)))
		p.Y.Tick.Marker = decades{floor}
	}
	// On a log axis bars are drawn as log10(v/floor) over a linear axis
	// labelled in decades: gonum's LogScale cannot draw a bar from 0.
	y := func(v float64) float64 {
		if !logY {
			return v
		}
		return math.Log10(math.Max(v, floor) / floor) // a zero bar sits on the floor
	}
	for i, s := range ss {
		vals := make(plotter.Values, len(s.values))
		for j, v := range s.values {
			vals[j] = y(v)
		}
		b, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return err
		}
		b.Color = plotutil.Color(i)
		b.LineStyle.Width = 0
		b.Offset = vg.Length(float64(i)-float64(len(ss)-1)/2) * w
		p.Add(b)
		p.Legend.Add(s.label, b)
	}
	if hline > 0 {
		l, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: y(hline)}, {X: float64(len(categories)) - 0.5, Y: y(hline)}})
		if err != nil {
			return err
		}
		l.Color = color.RGBA{R: 200, A: 255}
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(l)
		p.Legend.Add(hlabel, l)
	}
	p.NominalX(categories...)
	// Headroom above the tallest bar for the legend, one line per entry.
	entries := float64(len(ss))
	if hline > 0 {
		entries++
	}
	if logY {
		p.Y.Min = 0
		p.Y.Max = math.Ceil(p.Y.Max + 0.35*entries)
	} else {
		p.Y.Max *= 1.15 + 0.12*entries
	}
	p.Add(plotter.NewGrid())
	return p.Save(7*vg.Inch, 4*vg.Inch, path)
}

// decades labels a log10(v/floor) axis with the values of its decades.
type decades struct{ floor float64 }

func (d decades) Ticks(min, max float64) []plot.Tick {
	var ts []plot.Tick
	for k := 0.0; k <= math.Ceil(max); k++ {
		ts = append(ts, plot.Tick{Value: k, Label: fmt.Sprintf("%g", d.floor*math.Pow(10, k))})
	}
	return ts
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
	case benchsystems.Floor:
		return "tcp floor"
	case benchsystems.MonolockBare:
		return "monolock, bare"
	case benchsystems.Monolock:
		return "monolock, Go"
	}
	return sys
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// writeCharts draws every chart of the report into dir and returns their
// file names by key.
func writeCharts(dir string, r *Results) (map[string]string, error) {
	out := map[string]string{}
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
		var ss, lat []series
		for _, w := range workerCounts(r) {
			s := series{label: workersLabel(w)}
			l := series{label: "p99, " + workersLabel(w)}
			for _, sys := range systems {
				c := findThroughput(r, sys, w)
				s.values = append(s.values, c.Stats.PerSec)
				l.values = append(l.values, ms(c.Stats.P99))
			}
			ss, lat = append(ss, s), append(lat, l)
		}
		var cats []string
		for _, sys := range systems {
			cats = append(cats, chartLabel(sys))
		}
		if err := add("throughput", "throughput.png", barChart(filepath.Join(dir, "throughput.png"),
			"Uncontended acquire+release cycles per second", "cycles/s (log)", cats, ss, true, 0, "")); err != nil {
			return nil, err
		}
		if err := add("throughput-latency", "throughput-latency.png", barChart(filepath.Join(dir, "throughput-latency.png"),
			"Uncontended cycle latency, p99", "ms (log)", cats, lat, true, 0, "")); err != nil {
			return nil, err
		}
	}
	// 2. handoff latency p50/p99 per system.
	if len(r.Handoff) > 0 {
		p50 := series{label: "p50"}
		p99 := series{label: "p99"}
		var cats []string
		for _, c := range r.Handoff {
			cats = append(cats, c.System)
			p50.values = append(p50.values, ms(c.Result.Latency.P50))
			p99.values = append(p99.values, ms(c.Result.Latency.P99))
		}
		if err := add("handoff", "handoff.png", barChart(filepath.Join(dir, "handoff.png"),
			fmt.Sprintf("Handoff latency, %d workers on one lock", r.Handoff[0].Workers), "ms (log)", cats, []series{p50, p99}, true, 0, "")); err != nil {
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
		var mem, cpu []series
		for _, n := range counts {
			m := series{label: fmt.Sprintf("%d holders", n)}
			c := series{label: fmt.Sprintf("%d holders", n)}
			for _, sys := range systems {
				cell := findIdle(r, sys, n)
				m.values = append(m.values, cell.Result.BytesPerHolder/1024)
				c.values = append(c.values, cell.Result.CPUCores)
			}
			mem, cpu = append(mem, m), append(cpu, c)
		}
		if err := add("idle-memory", "idle-memory.png", barChart(filepath.Join(dir, "idle-memory.png"),
			"Server memory per idle holder (10 s lease)", "KiB per holder (log)", systems, mem, true, 8, "target: 8 KiB")); err != nil {
			return nil, err
		}
		if err := add("idle-cpu", "idle-cpu.png", barChart(filepath.Join(dir, "idle-cpu.png"),
			"Server CPU spent keeping idle holders alive", "cores", systems, cpu, false, 0.5, "target: 0.5 core")); err != nil {
			return nil, err
		}
	}
	// 4. dead-holder detection, median and worst, against the lease.
	if len(r.Dead) > 0 {
		med := series{label: "median"}
		worst := series{label: "worst"}
		var cats []string
		for _, c := range r.Dead {
			cats = append(cats, c.System)
			m, w := deadFigures(c.Result)
			med.values = append(med.values, ms(m))
			worst.values = append(worst.values, ms(w))
		}
		lease := ms(r.Dead[0].Result.Lease)
		if err := add("dead", "dead-holder.png", barChart(filepath.Join(dir, "dead-holder.png"),
			"Frozen holder: freeze to grant of the waiter", "ms", cats, []series{med, worst}, false, lease, "lease / TTL")); err != nil {
			return nil, err
		}
	}
	// 5. clients: uncontended cycles/s at 1 and 16 workers.
	if len(r.Clients) > 0 {
		names := clientOrder(r)
		var ss []series
		for _, w := range []int{1, 16} {
			s := series{label: workersLabel(w)}
			for _, n := range names {
				c, _ := findClient(r, n, "uncontended", w)
				s.values = append(s.values, c.Stats.PerSec)
			}
			ss = append(ss, s)
		}
		h := series{label: "handoffs/s, 16 workers"}
		for _, n := range names {
			c, _ := findClient(r, n, "handoff", 16)
			h.values = append(h.values, c.Stats.PerSec)
		}
		ss = append(ss, h)
		if err := add("clients", "clients.png", barChart(filepath.Join(dir, "clients.png"),
			"Clients through their conformance drivers", "per second (log)", names, ss, true, 0, "")); err != nil {
			return nil, err
		}
	}
	// 6. safety margin of every run.
	if len(r.Safety) > 0 && r.SafetyRun != nil {
		if err := add("safety", "safety-margin.png", writeSafetyChart(filepath.Join(dir, "safety-margin.png"), r)); err != nil {
			return nil, err
		}
	}
	// 8. work overlap of every run.
	if len(r.Overlap) > 0 && r.OverlapRun != nil {
		if err := add("overlap", "work-overlap.png", writeOverlapChart(filepath.Join(dir, "work-overlap.png"), r)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// runPoint is one run on a dot chart: its x, and whether it is marked (a
// bound or off the scale, not a measurement), which draws a triangle on it.
type runPoint struct {
	x      float64
	marked bool
}

// addRunDots draws a dot chart on p: one row per row index (the first on
// top), one colour per fault label, the runs of each row and fault as
// points from runs, slightly apart per fault, and a black triangle over
// every marked one, named markLabel in the legend. It returns the smallest
// and largest x drawn (lo > hi when none is).
func addRunDots(p *plot.Plot, rows int, faults []string, runs func(row, fault int) []runPoint, markLabel string) (lo, hi float64, err error) {
	lo, hi = math.Inf(1), math.Inf(-1)
	var marked plotter.XYs
	for j, label := range faults {
		var pts plotter.XYs
		off := (float64(len(faults)-1)/2 - float64(j)) * 0.14 // first fault on top, as in the legend
		for i := range rows {
			for _, run := range runs(i, j) {
				pt := plotter.XY{X: run.x, Y: float64(rows-1-i) + off}
				lo, hi = math.Min(lo, run.x), math.Max(hi, run.x)
				if run.marked {
					marked = append(marked, pt)
				}
				pts = append(pts, pt)
			}
		}
		if len(pts) == 0 {
			continue
		}
		s, err := plotter.NewScatter(pts)
		if err != nil {
			return lo, hi, err
		}
		s.GlyphStyle = draw.GlyphStyle{Color: plotutil.Color(j), Radius: vg.Points(2.6), Shape: draw.CircleGlyph{}}
		p.Add(s)
		p.Legend.Add(label, s)
	}
	if len(marked) > 0 {
		s, err := plotter.NewScatter(marked)
		if err != nil {
			return lo, hi, err
		}
		s.GlyphStyle = draw.GlyphStyle{Color: color.Black, Radius: vg.Points(4), Shape: draw.TriangleGlyph{}}
		p.Add(s)
		p.Legend.Add(markLabel, s)
	}
	return lo, hi, nil
}

// addVerticalLine draws a line at x across rows rows of a dot chart, with
// label in the legend unless it is empty.
func addVerticalLine(p *plot.Plot, x float64, rows int, c color.Color, dashed bool, label string) error {
	l, err := plotter.NewLine(plotter.XYs{{X: x, Y: -0.5}, {X: x, Y: float64(rows) - 0.5}})
	if err != nil {
		return err
	}
	l.Color = c
	if dashed {
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	}
	p.Add(l)
	if label != "" {
		p.Legend.Add(label, l)
	}
	return nil
}
