// Package charts draws the benchmark report's charts (package report says
// what each shows) as PNG files with gonum/plot.
package charts

import (
	"fmt"
	"image/color"
	"math"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/monolock/monolock/bench/internal/report"
)

// PNG is the report.Drawer that writes PNG files.
type PNG struct{}

var _ report.Drawer = PNG{}

// DrawBars draws c into path, 7 × 4 inches.
func (PNG) DrawBars(path string, c report.BarChart) error {
	title, ylabel, categories, ss, logY, hline, hlabel := c.Title, c.YLabel, c.Categories, c.Series, c.LogY, c.HLine, c.HLabel
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
			for _, v := range s.Values {
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
		vals := make(plotter.Values, len(s.Values))
		for j, v := range s.Values {
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
		p.Legend.Add(s.Label, b)
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

// DrawDots draws c into path, 9 inches wide and as tall as its rows and
// legend need.
func (PNG) DrawDots(path string, c report.DotChart) error {
	n := len(c.Rows)
	p := plot.New()
	p.Title.Text = c.Title
	if c.TitlePadding > 0 {
		p.Title.Padding = vg.Points(c.TitlePadding)
	}
	p.X.Label.Text = c.XLabel
	p.X.Min, p.X.Max = c.XMin, c.XMax
	p.X.Tick.Marker = ticks(c.Ticks)
	p.Legend.Top = true
	p.Legend.Left = true
	if err := addRunDots(p, c); err != nil {
		return err
	}
	for _, ln := range c.Lines {
		if err := addVerticalLine(p, ln, n); err != nil {
			return err
		}
	}
	labels := slices.Clone(c.Rows)
	slices.Reverse(labels) // NominalY goes up from the bottom row
	p.NominalY(labels...)
	p.Y.Min, p.Y.Max = -0.6, float64(n)-0.4+float64(c.LegendRows)*0.45
	p.Add(plotter.NewGrid())
	return p.Save(9*vg.Inch, vg.Length(1.6+0.42*float64(n)+0.25*float64(c.LegendRows))*vg.Inch, path)
}

// ticks is a report's tick function as gonum's Ticker.
type ticks func(min, max float64) []report.Tick

func (t ticks) Ticks(min, max float64) []plot.Tick {
	var ts []plot.Tick
	for _, k := range t(min, max) {
		ts = append(ts, plot.Tick{Value: k.Value, Label: k.Label})
	}
	return ts
}

// addRunDots draws c's points on p: one row per row index (the first on
// top), one colour per fault label, slightly apart per fault, and a black
// triangle over every marked one, named c.MarkLabel in the legend.
func addRunDots(p *plot.Plot, c report.DotChart) error {
	rows, faults := len(c.Rows), c.Faults
	var marked plotter.XYs
	for j, label := range faults {
		var pts plotter.XYs
		off := (float64(len(faults)-1)/2 - float64(j)) * 0.14 // first fault on top, as in the legend
		for i := range rows {
			for _, run := range c.Points[i][j] {
				pt := plotter.XY{X: run.X, Y: float64(rows-1-i) + off}
				if run.Marked {
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
			return err
		}
		s.GlyphStyle = draw.GlyphStyle{Color: plotutil.Color(j), Radius: vg.Points(2.6), Shape: draw.CircleGlyph{}}
		p.Add(s)
		p.Legend.Add(label, s)
	}
	if len(marked) > 0 {
		s, err := plotter.NewScatter(marked)
		if err != nil {
			return err
		}
		s.GlyphStyle = draw.GlyphStyle{Color: color.Black, Radius: vg.Points(4), Shape: draw.TriangleGlyph{}}
		p.Add(s)
		p.Legend.Add(c.MarkLabel, s)
	}
	return nil
}

// addVerticalLine draws ln across rows rows of a dot chart.
func addVerticalLine(p *plot.Plot, ln report.Line, rows int) error {
	l, err := plotter.NewLine(plotter.XYs{{X: ln.X, Y: -0.5}, {X: ln.X, Y: float64(rows) - 0.5}})
	if err != nil {
		return err
	}
	l.Color = ln.Color
	if ln.Dashed {
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	}
	p.Add(l)
	if ln.Label != "" {
		p.Legend.Add(ln.Label, l)
	}
	return nil
}
