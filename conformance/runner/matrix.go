package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/monolock/monolock/conformance/scenario"
)

// Matrix is the result of a whole run.
type Matrix struct {
	Clients   []string `json:"clients"`
	Scenarios []string `json:"scenarios"`
	Results   []Result `json:"results"`
	// Unexpected counts results that make the run fail: fail, error and
	// timeout not listed as known failures, and xpass.
	Unexpected int   `json:"unexpected"`
	ElapsedMS  int64 `json:"elapsed_ms"` // builds included
	BuildMS    int64 `json:"build_ms"`   // server and driver builds
}

// MatrixOptions configure RunMatrix.
type MatrixOptions struct {
	Options
	Parallel    int    // scenario runs at once (default 4)
	FailuresDir string // conformance/failures; "" disables failure lists
	SkipBuild   bool   // do not run the clients' build commands
	// Rerun reruns a fail or timeout up to this many times; a pass on rerun
	// is reported as flaky and does not fail the run. 0: strict.
	Rerun int
	Log   io.Writer
}

// BuildClient runs a client's build command in its directory.
func BuildClient(ctx context.Context, root string, c Client) error {
	if len(c.Build) == 0 {
		return nil
	}
	cmd := exec.CommandContext(ctx, c.Build[0], c.Build[1:]...)
	cmd.Dir = filepath.Join(root, c.Dir)
	cmd.Env = append(os.Environ(), c.ExtraEnv()...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %v\n%s", c.Name, err, tail(string(out), 4000))
	}
	return nil
}

// RunMatrix builds every client, then runs every scenario against every
// client on a bounded pool. Each run has its own back end and driver process,
// so runs share no state and may overlap freely.
func RunMatrix(ctx context.Context, clients []Client, scs []*scenario.Scenario, opt MatrixOptions) Matrix {
	t0 := time.Now()
	var logMu sync.Mutex // workers log concurrently
	logf := func(format string, a ...any) {
		if opt.Log != nil {
			logMu.Lock()
			fmt.Fprintf(opt.Log, format, a...)
			logMu.Unlock()
		}
	}
	if opt.Parallel <= 0 {
		opt.Parallel = 4
	}
	m := Matrix{}
	for _, s := range scs {
		m.Scenarios = append(m.Scenarios, s.Name)
	}
	needServer := false
	for _, s := range scs {
		needServer = needServer || s.Backend != scenario.BackendFake
	}
	if needServer && opt.ServerBin == "" && opt.ServerErr == nil {
		logf("building the server...\n")
		opt.ServerBin, opt.ServerErr = BuildServer(ctx, opt.Root)
		if opt.ServerErr != nil {
			logf("%v\n", opt.ServerErr)
		}
	}

	type job struct {
		c  Client
		s  *scenario.Scenario
		at int
	}
	var jobs []job
	buildErr := map[string]error{}
	for _, c := range clients {
		m.Clients = append(m.Clients, c.Name)
		if !opt.SkipBuild {
			logf("building %s...\n", c.Name)
			if err := BuildClient(ctx, opt.Root, c); err != nil {
				logf("%v\n", err)
				buildErr[c.Name] = err
			}
		}
		for _, s := range scs {
			jobs = append(jobs, job{c, s, len(jobs)})
		}
	}
	m.BuildMS = time.Since(t0).Milliseconds()
	m.Results = make([]Result, len(jobs))
	// Long scenarios first, so the pool does not end on one slow straggler.
	order := append([]job(nil), jobs...)
	sort.SliceStable(order, func(i, j int) bool { return weight(order[i].s) > weight(order[j].s) })

	known := map[string]map[string]bool{}
	for _, c := range clients {
		list, err := LoadFailures(opt.FailuresDir, c.Name)
		if err != nil {
			buildErr[c.Name] = fmt.Errorf("failure list: %w", err)
		}
		known[c.Name] = list
	}
	runPool := func(js []job, parallel int) {
		var wg sync.WaitGroup
		queue := make(chan job)
		for range parallel {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range queue {
					var res Result
					if err := buildErr[j.c.Name]; err != nil {
						res = Result{Client: j.c.Name, Scenario: j.s.Name, Status: Error, Detail: err.Error()}
					} else {
						res = RunOne(ctx, j.c, j.s, opt.Options)
					}
					m.Results[j.at] = res
					if res.Status != Pass && res.Status != NA {
						logf("%-12s %-40s %s %s\n", res.Client, res.Scenario, res.Status, firstLine(res.Detail))
					}
				}
			}()
		}
		for _, j := range js {
			queue <- j
		}
		close(queue)
		wg.Wait()
	}
	runPool(order, opt.Parallel)

	// A timing miss on a machine shared with other work can be noise, a real
	// bug misses again: rerun misses (not known failures) on a smaller pool,
	// and mark a pass on rerun as flaky, keeping the first miss for the record.
	// Safety scenarios are never rerun: a miss of a safety rule is a miss.
	for round := 0; round < opt.Rerun; round++ {
		var again []job
		first := map[int]Result{}
		for _, j := range jobs {
			r := m.Results[j.at]
			safety := j.s.Class == scenario.ClassSafety
			if (r.Status == Fail || r.Status == Timeout) && !known[j.c.Name][j.s.Name] && !safety {
				again = append(again, j)
				if !r.Flaky {
					first[j.at] = r
				}
			}
		}
		if len(again) == 0 {
			break
		}
		logf("rerunning %d misses...\n", len(again))
		runPool(again, min(2, opt.Parallel))
		for at, f := range first {
			if m.Results[at].Status == Pass {
				m.Results[at].Flaky = true
				m.Results[at].Detail = "passed on rerun; first attempt: " + string(f.Status) + ": " + f.Detail
			}
		}
	}

	for i := range m.Results {
		res := &m.Results[i]
		listed := known[res.Client][res.Scenario]
		switch {
		case listed && res.Status == Pass:
			res.Status, res.Detail = XPass, "listed in failures/"+res.Client+".txt but passed: remove it from the list"
		case listed && (res.Status == Fail || res.Status == Error || res.Status == Timeout):
			res.Detail = string(res.Status) + ": " + res.Detail
			res.Status = XFail
		}
		switch res.Status {
		case Fail, Error, Timeout, XPass:
			m.Unexpected++
		}
	}
	m.ElapsedMS = time.Since(t0).Milliseconds()
	return m
}

// weight estimates a scenario's duration for scheduling.
func weight(s *scenario.Scenario) int {
	w := 0
	for _, st := range s.Steps {
		w += st.MS + st.DelayMS
		if st.LeaseMS != nil && *st.LeaseMS < 10000 {
			w += int(*st.LeaseMS)
		}
	}
	return w
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// Get returns the result of a client on a scenario.
func (m Matrix) Get(client, scenario string) (Result, bool) {
	for _, r := range m.Results {
		if r.Client == client && r.Scenario == scenario {
			return r, true
		}
	}
	return Result{}, false
}

var symbols = map[Status]string{
	Pass: "ok", Fail: "FAIL", Error: "ERROR", Timeout: "TIMEOUT", NA: "n/a", XFail: "xfail", XPass: "XPASS",
}

// symbol is the result's cell in the table; ok~ is a pass on rerun.
func (r Result) symbol() string {
	if r.Status == Pass && r.Flaky {
		return "ok~"
	}
	return symbols[r.Status]
}

// WriteTable prints the scenario x client table, then the details of every
// result that is not a pass.
func (m Matrix) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "scenario")
	for _, c := range m.Clients {
		fmt.Fprint(tw, "\t", c)
	}
	fmt.Fprintln(tw)
	for _, s := range m.Scenarios {
		fmt.Fprint(tw, s)
		for _, c := range m.Clients {
			r, _ := m.Get(c, s)
			fmt.Fprint(tw, "\t", r.symbol())
		}
		fmt.Fprintln(tw)
	}
	_ = tw.Flush()
	for _, r := range m.Results {
		if r.Status == Pass && !r.Flaky {
			continue
		}
		fmt.Fprintf(w, "\n%s / %s: %s\n  %s\n", r.Client, r.Scenario, r.symbol(), r.Detail)
		if r.Stderr != "" && r.Status != XFail {
			fmt.Fprintf(w, "  driver stderr (tail):\n%s\n", indent(tail(r.Stderr, 1500)))
		}
	}
	fmt.Fprintf(w, "\n%d clients x %d scenarios in %.1fs (builds %.1fs): %s\n", len(m.Clients), len(m.Scenarios),
		float64(m.ElapsedMS)/1000, float64(m.BuildMS)/1000, m.summary())
}

func (m Matrix) summary() string {
	count := map[Status]int{}
	for _, r := range m.Results {
		count[r.Status]++
	}
	flaky := 0
	for _, r := range m.Results {
		if r.Flaky && r.Status == Pass {
			flaky++
		}
	}
	var parts []string
	for _, st := range []Status{Pass, Fail, Error, Timeout, NA, XFail, XPass} {
		if count[st] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", count[st], st))
		}
		if st == Pass && flaky > 0 {
			parts = append(parts, fmt.Sprintf("%d of them on rerun (ok~)", flaky))
		}
	}
	verdict := "OK"
	if m.Unexpected > 0 {
		verdict = fmt.Sprintf("FAILED (%d unexpected)", m.Unexpected)
	}
	return strings.Join(parts, ", ") + " — " + verdict
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}

// WriteMarkdown writes the table and the misses as Markdown.
func (m Matrix) WriteMarkdown(w io.Writer) {
	fmt.Fprintln(w, "# Conformance matrix")
	fmt.Fprintln(w)
	fmt.Fprint(w, "| scenario |")
	for _, c := range m.Clients {
		fmt.Fprintf(w, " %s |", c)
	}
	fmt.Fprint(w, "\n|---|")
	for range m.Clients {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	for _, s := range m.Scenarios {
		fmt.Fprintf(w, "| %s |", s)
		for _, c := range m.Clients {
			r, _ := m.Get(c, s)
			fmt.Fprintf(w, " %s |", r.symbol())
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "\n%s\n", m.summary())
	first := true
	for _, r := range m.Results {
		if r.Status == Pass && !r.Flaky {
			continue
		}
		if first {
			fmt.Fprintln(w, "\n## Details")
			first = false
		}
		fmt.Fprintf(w, "\n- **%s / %s**: %s — %s\n", r.Client, r.Scenario, r.symbol(),
			strings.ReplaceAll(r.Detail, "\n", " "))
	}
}

// WriteFiles writes matrix.json and matrix.md into dir.
func (m Matrix) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "matrix.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "matrix.md"))
	if err != nil {
		return err
	}
	m.WriteMarkdown(f)
	return f.Close()
}
