// Package runner runs conformance scenarios against client drivers: one
// fresh back end (real server, fake server, or real server behind the fault
// proxy) and one fresh driver process per run, steps interpreted in order,
// checks on the recorded bytes once the driver has quit. RunMatrix runs the
// whole client x scenario matrix on a bounded pool and applies the
// known-failure lists.
package runner

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/monolock/monolock/conformance/driver"
	"github.com/monolock/monolock/conformance/fake"
	"github.com/monolock/monolock/conformance/proxy"
	"github.com/monolock/monolock/conformance/scenario"
	"github.com/monolock/monolock/conformance/wire"
)

// Status is the outcome of one client on one scenario.
type Status string

const (
	Pass    Status = "pass"
	Fail    Status = "fail"    // an expectation did not hold
	Error   Status = "error"   // runtime error: bad output, driver_error, crash, back end down
	Timeout Status = "timeout" // the driver hung: no ready, scenario budget spent, no exit after quit
	NA      Status = "n/a"     // the driver lacks a capability the scenario needs
	XFail   Status = "xfail"   // failed, and listed in failures/<client>.txt
	XPass   Status = "xpass"   // listed as a known failure but passed: the list must shrink
)

// Result is one cell of the matrix.
type Result struct {
	Client     string `json:"client"`
	Scenario   string `json:"scenario"`
	Status     Status `json:"status"`
	Detail     string `json:"detail,omitempty"`
	DurationMS int64  `json:"duration_ms"`
	Stderr     string `json:"stderr,omitempty"` // driver log tail on a miss
	Flaky      bool   `json:"flaky,omitempty"`  // passed only on a rerun
}

// Options configure a run.
type Options struct {
	Root      string // repository root; client dirs are relative to it
	ServerBin string // the real server, for server and proxy scenarios
	ServerErr error  // why there is no ServerBin, reported per scenario
	// StartTimeout bounds the wait for the driver's ready event.
	StartTimeout time.Duration
	// QuitGrace bounds the wait for the driver's exit after quit.
	QuitGrace time.Duration
}

func (o Options) withDefaults() Options {
	if o.StartTimeout == 0 {
		o.StartTimeout = 20 * time.Second
	}
	if o.QuitGrace == 0 {
		o.QuitGrace = 3 * time.Second
	}
	return o
}

const (
	defaultScenarioTimeout = 20 * time.Second
	defaultWithin          = 3 * time.Second
	settleTimeout          = 2 * time.Second
)

// outcome carries a status out of the step loop.
type outcome struct {
	status Status
	msg    string
}

func (o *outcome) Error() string { return o.msg }

func failf(format string, a ...any) error {
	return &outcome{Fail, fmt.Sprintf(format, a...)}
}

// conn is a labelled connection of the fake server or the proxy.
type conn struct {
	rec     *wire.Record
	fake    *fake.Conn  // nil behind the proxy
	proxied *proxy.Conn // nil on the fake server
}

// run is the state of one client on one scenario.
type run struct {
	sc     *scenario.Scenario
	opt    Options
	start  time.Time
	drv    *driver.Process
	addr   string
	srv    *server // the real server (server and proxy back ends)
	fake   *fake.Server
	proxy  *proxy.Proxy
	conns  map[string]*conn
	marks  map[string]time.Duration
	leases map[string]float64 // lease of each id, ms
	tokens map[string]uint64  // token of each id's last acquired event
}

// RunOne runs one scenario against one client and returns its result
// (failure lists are applied by the caller).
func RunOne(ctx context.Context, c Client, sc *scenario.Scenario, opt Options) Result {
	opt = opt.withDefaults()
	t0 := time.Now()
	res := Result{Client: c.Name, Scenario: sc.Name}
	st, msg, stderr := runOne(ctx, c, sc, opt)
	res.Status, res.Detail = st, msg
	if st != Pass && st != NA {
		res.Stderr = tail(stderr, 4000)
	}
	res.DurationMS = time.Since(t0).Milliseconds()
	return res
}

func runOne(ctx context.Context, c Client, sc *scenario.Scenario, opt Options) (Status, string, string) {
	r := &run{sc: sc, opt: opt, start: time.Now(), conns: map[string]*conn{},
		marks: map[string]time.Duration{}, leases: map[string]float64{}, tokens: map[string]uint64{}}
	budget := defaultScenarioTimeout
	if sc.TimeoutMS > 0 {
		budget = time.Duration(sc.TimeoutMS) * time.Millisecond
	}

	// Back end first, so a dead server is not blamed on the client.
	switch sc.Backend {
	case scenario.BackendFake:
		f, err := fake.Listen(r.start)
		if err != nil {
			return Error, "back end: " + err.Error(), ""
		}
		defer f.Close()
		r.fake, r.addr = f, f.Addr()
	case scenario.BackendServer, scenario.BackendProxy:
		if opt.ServerBin == "" {
			return Error, fmt.Sprintf("back end: no server binary (%v)", opt.ServerErr), ""
		}
		srv, err := startServer(ctx, opt.ServerBin, sc.Server)
		if err != nil {
			return Error, "back end: " + err.Error(), ""
		}
		defer srv.stop()
		r.srv, r.addr = srv, srv.addr
		if sc.Backend == scenario.BackendProxy {
			p, err := proxy.Listen(srv.addr, r.start)
			if err != nil {
				return Error, "back end: " + err.Error(), ""
			}
			defer p.Close()
			r.proxy, r.addr = p, p.Addr()
		}
	}

	sctx, cancel := context.WithTimeout(ctx, opt.StartTimeout)
	drv, ready, err := driver.Start(sctx, filepath.Join(opt.Root, c.Dir), c.Run, c.ExtraEnv(), r.start)
	cancel()
	if err != nil {
		st := Error
		if errors.Is(err, context.DeadlineExceeded) {
			st = Timeout
		}
		if drv != nil {
			// Let the reader see the exit so the stderr tail is complete.
			_ = drv.Quit(time.Second)
		}
		return st, "driver start: " + err.Error(), stderrOf(drv)
	}
	defer drv.Kill()
	r.drv = drv
	if missing := missingCaps(ready, sc.Requires); len(missing) > 0 {
		_ = drv.Quit(opt.QuitGrace)
		return NA, "driver lacks capability " + strings.Join(missing, ", "), ""
	}

	sctx, cancel = context.WithTimeout(ctx, budget)
	defer cancel()
	stepErr := r.steps(sctx)
	if stepErr == nil {
		if extra := drv.Pending(""); len(extra) > 0 {
			stepErr = failf("unexpected events after the last step: %s", lines(extra))
		}
	}
	quitErr := drv.Quit(opt.QuitGrace)
	if stepErr != nil {
		var o *outcome
		switch {
		case errors.As(stepErr, &o):
			return o.status, o.msg, drv.Stderr()
		case errors.Is(stepErr, driver.ErrFault):
			return Error, stepErr.Error(), drv.Stderr()
		case sctx.Err() != nil:
			return Timeout, fmt.Sprintf("scenario budget of %v spent: %v", budget, stepErr), drv.Stderr()
		default:
			return Error, stepErr.Error(), drv.Stderr()
		}
	}
	if quitErr != nil {
		if errors.Is(quitErr, driver.ErrHung) {
			return Timeout, quitErr.Error(), drv.Stderr()
		}
		return Error, quitErr.Error(), drv.Stderr()
	}
	// The driver is gone, so every byte it sent is on its way: wait for each
	// connection to see the end before judging bytes.
	r.settle()
	for i, ck := range sc.Checks {
		if err := r.check(ck); err != nil {
			return Fail, fmt.Sprintf("check %d (%s): %v", i+1, ck.Check, err), drv.Stderr()
		}
	}
	return Pass, "", ""
}

func stderrOf(p *driver.Process) string {
	if p == nil {
		return ""
	}
	return p.Stderr()
}

func missingCaps(ready driver.Event, need []string) []string {
	have := map[string]bool{}
	for _, c := range ready.Capabilities {
		have[c] = true
	}
	var missing []string
	for _, n := range need {
		if !have[n] {
			missing = append(missing, n)
		}
	}
	return missing
}

func (r *run) now() time.Duration { return time.Since(r.start) }

// settle waits (briefly) until every connection has ended, so checks see
// every byte the driver sent before it exited.
func (r *run) settle() {
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	var recs []*wire.Record
	if r.fake != nil {
		for _, c := range r.fake.Conns() {
			recs = append(recs, c.Record())
		}
	}
	if r.proxy != nil {
		for _, c := range r.proxy.Conns() {
			recs = append(recs, c.Record())
		}
	}
	for _, rec := range recs {
		for {
			ended, ch := rec.Ended()
			if ended {
				break
			}
			select {
			case <-ch:
				continue
			case <-ctx.Done():
			}
			break
		}
	}
}

func lines(evs []driver.Event) string {
	var parts []string
	for _, e := range evs {
		parts = append(parts, e.Line)
	}
	return strings.Join(parts, " ")
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
