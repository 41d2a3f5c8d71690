package overlap

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/monolock/monolock/bench/internal/safety"
	"github.com/monolock/monolock/conformance/proxy"
	"github.com/monolock/monolock/conformance/wire"
)

// Tool is one way of running a command while holding a lock.
type Tool struct {
	Name     string // row label: "monolock run", "etcdctl lock"
	Upstream string // the server A's connections reach through the proxy
	Direct   string // the server B dials
	// Argv is the command line that holds name through the server at addr
	// while cmd runs.
	Argv func(addr, name string, cmd []string) []string
	Env  []string // added to the environment of both commands
	// Queued reports whether a second claimant waits for name.
	Queued func(ctx context.Context, name string) (bool, error)
	// Wire: A's connections speak the monolock protocol, so the proxy's
	// record tells when A sent its last acknowledged heartbeat.
	Wire bool
}

// Options are one measurement's knobs.
type Options struct {
	Lease  time.Duration // lease / session TTL of both commands
	Runs   int           // runs per cell
	Delay  time.Duration // the extra delay of safety.DelayDown
	Job    time.Duration // A's job: how long it appends unless stopped
	Window time.Duration // how long to watch after the fault at most
	Every  time.Duration // time between appends
	Faults []safety.Fault
	Self   string // the bench binary, for `bench append`
	Dir    string // where the runs' files go
}

// bJob is B's job: it only has to show when it started.
const bJob = 500 * time.Millisecond

// setupTimeout bounds A's first append and B's queueing, each.
const setupTimeout = 20 * time.Second

// Cell is the runs of one tool and variant under one fault.
type Cell struct {
	Fault safety.Fault `json:"fault"`
	Runs  []Run        `json:"runs"`
}

// Measure runs every fault of o.Faults o.Runs times with tool and variant
// v. The runs are independent (each its own lock name, proxy and
// processes, started at a random moment within a lease) and run
// concurrently, so the cells take about as long as the slowest run: the
// fault, then at most o.Window.
func Measure(ctx context.Context, tool Tool, v Variant, o Options) []Cell {
	stamp := time.Now().UnixNano()
	runs := safety.ForEachRun(ctx, o.Faults, o.Runs, 0, o.Lease, Run{Err: "interrupted"}, func(f safety.Fault, k int) Run {
		name := fmt.Sprintf("overlap-%s-%s-%s-%d-%d", safety.Slug(tool.Name), v, f, k, stamp)
		dir := filepath.Join(o.Dir, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return Run{Err: err.Error()}
		}
		return runOne(ctx, tool, v, f, o, name, dir)
	})
	cells := make([]Cell, len(o.Faults))
	for i, f := range o.Faults {
		cells[i] = Cell{Fault: f, Runs: runs[i]}
	}
	return cells
}

// runOne is one run: A holds through a fresh proxy and appends, B queues
// on its direct link, a random part of the refresh cycle later f hits A's
// link, and the run watches until B has appended and A's command is gone,
// or o.Window after the fault.
func runOne(ctx context.Context, tool Tool, v Variant, f safety.Fault, o Options, name, dir string) Run {
	// The proxy stamps its record from pStart; pMono is the same instant
	// on CLOCK_MONOTONIC (Go's monotonic clock is CLOCK_MONOTONIC too).
	pStart, pMono := time.Now(), Now()
	p, err := proxy.Listen(tool.Upstream, pStart)
	if err != nil {
		return Run{Err: "proxy: " + err.Error()}
	}
	defer p.Close()
	aFile, bFile := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	appendCmd := func(file string, job time.Duration, v Variant) []string {
		return append([]string{o.Self, "append", "-file", file, "-every", o.Every.String(), "-for", job.String()}, v.args()...)
	}
	a, err := startProc(tool.Argv(p.Addr(), name, appendCmd(aFile, o.Job, v)), tool.Env, filepath.Join(dir, "a.log"))
	if err != nil {
		return Run{Err: "A: " + err.Error()}
	}
	var b *proc
	defer func() {
		a.kill(aFile)
		if b != nil {
			b.kill(bFile)
		}
	}()
	if err := waitFor(ctx, setupTimeout, func() bool { return appended(aFile) || a.exited() }); err != nil || !appended(aFile) {
		return Run{Err: "A did not start appending: " + a.why(err)}
	}
	b, err = startProc(tool.Argv(tool.Direct, name, appendCmd(bFile, bJob, Plain)), tool.Env, filepath.Join(dir, "b.log"))
	if err != nil {
		return Run{Err: "B: " + err.Error()}
	}
	err = waitFor(ctx, setupTimeout, func() bool {
		q, err := tool.Queued(ctx, name)
		return (err == nil && q) || b.exited() || appended(bFile)
	})
	if err != nil || b.exited() {
		return Run{Err: "B did not queue: " + b.why(err)}
	}
	// The fault falls at a random point of A's refresh cycle (lease/4 for
	// monolock, TTL/3 for etcd), as in the safety workload.
	select {
	case <-time.After(o.Lease/4 + rand.N(o.Lease/2)):
	case <-ctx.Done():
		return Run{Err: "interrupted"}
	}
	if appended(bFile) {
		return Run{Err: "B appended before the fault"}
	}
	if a.exited() {
		return Run{Err: "A ended before the fault: " + a.why(nil)}
	}
	pids := readAppends(aFile).PIDs
	fault := Now()
	safety.Inject(p, f, o.Delay)

	deadline := fault + o.Window.Nanoseconds()
	var goneAt int64
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for Now() < deadline {
		if goneAt == 0 && allGone(pids) {
			goneAt = Now()
		}
		// Done when B has started and A's command is gone, with a moment
		// for A's lock tool to exit (its status is part of the result).
		if goneAt != 0 && appended(bFile) && (a.exited() || Now()-goneAt > int64(2*time.Second)) {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return Run{Err: "interrupted"}
		}
	}
	end := Now()
	running := !allGone(pids)
	exit := a.exitCode()
	a.kill(aFile)
	b.kill(bFile)
	ra, rb := readAppends(aFile), readAppends(bFile)
	r := Run{
		ALast:    time.Duration(ra.Last - fault),
		AEnded:   ra.Ended,
		ARunning: running,
		AExit:    exit,
		ASaid:    a.lastLine(),
		Observed: time.Duration(end - fault),
	}
	if rb.N > 0 {
		r.HasB, r.BFirst = true, time.Duration(rb.First-fault)
	}
	if tool.Wire {
		if t, ok := lastAckedSend(p, o.Lease); ok {
			r.HasT, r.T = true, t-time.Duration(fault-pMono)
		}
	}
	return r
}

// lastAckedSend is, over A's connections through p, the send of the last
// request whose reply reached A within 0.8 × lease of it (a later reply
// finds the loss decided), on p's clock.
func lastAckedSend(p *proxy.Proxy, lease time.Duration) (time.Duration, bool) {
	var t time.Duration
	found := false
	for _, c := range p.Conns() {
		chunks, _, _ := c.Record().Snapshot()
		for _, x := range wire.Analyze(chunks).Exchanges {
			if x.Reply == nil || x.Reply.At-x.Send.At > lease*4/5 {
				continue
			}
			if !found || x.Send.At > t {
				t, found = x.Send.At, true
			}
		}
	}
	return t, found
}

// appended reports whether file holds an append.
func appended(file string) bool { return readAppends(file).N > 0 }

// readAppends parses file; a missing or unreadable file has no appends.
func readAppends(file string) Appends {
	b, err := os.ReadFile(file)
	if err != nil {
		return Appends{}
	}
	a, _ := Parse(b)
	return a
}

// waitFor polls cond every 10 ms until it holds, for at most d.
func waitFor(ctx context.Context, d time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// gone reports whether pid has exited (a zombie has).
func gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// pid (comm) S ...: the state follows the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return true
	}
	return b[i+2] == 'Z' || b[i+2] == 'X'
}

func allGone(pids []int) bool {
	for _, p := range pids {
		if !gone(p) {
			return false
		}
	}
	return true
}

// proc is one lock tool process and its command.
type proc struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	once sync.Once
}

func startProc(argv, env []string, logFile string) (*proc, error) {
	out, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, err
	}
	p := &proc{cmd: cmd, log: logFile, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitCode is the process's exit status, -1 if killed or still running.
func (p *proc) exitCode() int {
	if !p.exited() {
		return -1
	}
	return p.cmd.ProcessState.ExitCode()
}

// lastLine is the last non-empty line of the process's output, cut to
// 200 bytes.
func (p *proc) lastLine() string {
	b, _ := os.ReadFile(p.log)
	b = bytes.TrimSpace(b)
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	if len(b) > 200 {
		b = append(b[:197:197], "..."...)
	}
	return string(b)
}

// why says what went wrong: err, how the process ended, its log's end.
func (p *proc) why(err error) string {
	var parts []string
	if err != nil {
		parts = append(parts, err.Error())
	}
	if p.exited() {
		parts = append(parts, p.cmd.ProcessState.String())
	}
	if b, _ := os.ReadFile(p.log); len(b) > 0 {
		b = bytes.TrimSpace(b)
		if len(b) > 300 {
			b = b[len(b)-300:]
		}
		parts = append(parts, strings.ReplaceAll(string(b), "\n", " / "))
	}
	if len(parts) == 0 {
		return "no reason known"
	}
	return strings.Join(parts, ": ")
}

// kill ends the lock tool and every `bench append` process that wrote to
// file, each by its pid (and only if it is still an appender of file),
// and waits for the lock tool to be reaped.
func (p *proc) kill(file string) {
	p.once.Do(func() {
		_ = p.cmd.Process.Kill()
		for _, pid := range readAppends(file).PIDs {
			cl, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
			if err == nil && bytes.Contains(cl, []byte(file+"\x00")) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
	})
}
