package report

import (
	"os"
	"path/filepath"
)

// testDrawer stands in for charts.PNG in this package's tests, which link
// no plotting library: it writes each chart's title into its file and keeps
// the chart by file name, so that a test sees which charts Write drew and
// what they show. Package charts' tests draw them for real.
type testDrawer struct {
	bars map[string]BarChart
	dots map[string]DotChart
}

func newTestDrawer() *testDrawer {
	return &testDrawer{bars: map[string]BarChart{}, dots: map[string]DotChart{}}
}

func (d *testDrawer) DrawBars(path string, c BarChart) error {
	d.bars[filepath.Base(path)] = c
	return os.WriteFile(path, []byte(c.Title+"\n"), 0o644)
}

func (d *testDrawer) DrawDots(path string, c DotChart) error {
	d.dots[filepath.Base(path)] = c
	return os.WriteFile(path, []byte(c.Title+"\n"), 0o644)
}
