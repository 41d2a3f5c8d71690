package runstop

import (
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
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/conformance/proxy"
	"github.com/monolock/monolock/conformance/wire"
	"github.com/monolock/monolock/go/client"
	"github.com/monolock/monolock/go/testkit/launch"
)

const (
	// lease is monolock run's lease: its default grace is then
	// 0.2 x 2 s - 250 ms = 150 ms, and a case takes a few seconds.
	lease = 2 * time.Second
	// delay is what the delay fault adds to every byte towards the
	// holder, as in the safety-margin benchmark.
	delay = lease * 3 / 2
	// slack is added to every wait for an event, for a loaded machine. It
	// bounds how long the test waits, never what it accepts: the checks
	// compare instants, and nothing is retried.
	slack = 20 * time.Second
	// exitLockLost is monolock run's exit status after a loss.
	exitLockLost = 79
)

var monolockBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "runstop-")
	if err == nil {
		monolockBin, err = binary(dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// binary is $MONOLOCK_BIN, else monolock built from ../go into dir.
func binary(dir string) (string, error) {
	if bin := os.Getenv("MONOLOCK_BIN"); bin != "" {
		return bin, nil
	}
	out := filepath.Join(dir, "monolock")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/monolock")
	cmd.Dir = filepath.Join("..", "..", "go")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building monolock: %v\n%s", err, b)
	}
	return out, nil
}

// fault is one fault of the safety-margin benchmark, on every connection
// of monolock run through the proxy.
type fault struct {
	name   string
	inject func(p *proxy.Proxy)
}

var faults = []fault{
	{"blackhole-up", func(p *proxy.Proxy) { p.Set(proxy.Faults{Blackhole: [2]bool{wire.Up: true}}) }},
	{"blackhole-down", func(p *proxy.Proxy) { p.Set(proxy.Faults{Blackhole: [2]bool{wire.Down: true}}) }},
	{"blackhole-both", func(p *proxy.Proxy) { p.Set(proxy.Faults{Blackhole: [2]bool{true, true}}) }},
	{"delay-down", func(p *proxy.Proxy) { p.Set(proxy.Faults{Delay: [2]time.Duration{wire.Down: delay}}) }},
	{"reset", func(p *proxy.Proxy) { p.Reset() }},
}

// command is what monolock run runs. Each of its processes appends its
// pid to ./pids once it runs, which is the test's evidence of it.
type command struct {
	name   string
	script string
	procs  int // lines the script writes to ./pids
}

var commands = []command{
	// Every process ignores SIGTERM (the disposition is inherited), so
	// only SIGKILL ends them.
	{"ignores-sigterm", `trap '' TERM
echo $$ >> pids
sleep 300 & echo $! >> pids
sh -c 'echo $$ >> pids; exec sleep 300' &
wait`, 3},
	// A daemon that leaves the process group and the tree: the subshell
	// exits at once, so the setsid'd shell is an orphan in a session of
	// its own, with a child; both ignore SIGTERM. A signal to the group
	// never reaches them, and the command itself obeys SIGTERM at once.
	{"setsid-grandchild", `echo $$ >> pids
(setsid sh -c 'trap "" TERM; echo $$ >> pids; sleep 300 & echo $! >> pids; wait' &)
sleep 300 & echo $! >> pids
wait`, 4},
}

// TestEveryProcessReapedBeforeTheNextGrant: for every fault and command,
// monolock run holds a lock through the proxy and a second client waits
// for it at the server; after the fault, the second client must not be
// granted the lock while any process of the command is still there, dead
// or alive.
func TestEveryProcessReapedBeforeTheNextGrant(t *testing.T) {
	srv := startServer(t)
	for _, f := range faults {
		for _, c := range commands {
			t.Run(f.name+"/"+c.name, func(t *testing.T) { runCase(t, srv, f, c) })
		}
	}
}

func runCase(t *testing.T, srv *server, f fault, c command) {
	name := "runstop/" + f.name + "/" + c.name
	p, err := proxy.Listen(srv.addr, time.Now())
	require.NoError(t, err)
	t.Cleanup(p.Close)
	dir := t.TempDir()
	run := startRun(t, dir, "--server", p.Addr(), "--lease", lease.String(), name, "--", "sh", "-c", c.script)
	procs := waitProcs(t, dir, c.procs, run.exited, run.output)
	waiter := queueWaiter(t, srv.addr, name, procs)

	// The fault falls anywhere in a heartbeat interval (lease/4).
	time.Sleep(rand.N(lease / 4))
	select {
	case <-run.exited:
		t.Fatalf("monolock run ended before the fault:\n%s", run.output())
	case g := <-waiter:
		t.Fatalf("the waiter was granted before the fault (err %v)", g.err)
	default:
	}
	for _, pr := range procs {
		require.True(t, pr.running(), "pid %d ended before the fault", pr.pid)
	}
	f.inject(p)
	faultAt := time.Now()

	var g grant
	select {
	case g = <-waiter:
	case <-time.After(2*lease + delay + slack):
		t.Fatalf("the waiter was not granted within %v of the fault; monolock run:\n%s", 2*lease+delay+slack, run.output())
	}
	require.NoError(t, g.err)
	status := run.wait(t, lease+slack)
	t.Logf("granted %v after the fault; monolock run exited %d:\n%s", g.at.Sub(faultAt).Round(time.Millisecond), status, run.output())
	assert.Empty(t, g.survivors, "processes of the command still there when the waiter was granted")
	assert.Equal(t, exitLockLost, status)
}

// server is a running `monolock serve`.
type server struct {
	addr string
}

// startServer runs `monolock serve` on a free loopback port, without the
// admin API, until the test ends.
func startServer(t *testing.T) *server {
	cmd := launch.Command(monolockBin, "--listen", "127.0.0.1:0", "--admin", "off", "--data-dir", t.TempDir())
	srv, err := launch.Start(context.Background(), cmd, launch.Options{Wait: slack})
	require.NoError(t, err)
	t.Cleanup(srv.Kill)
	return &server{addr: srv.LockAddr}
}

// runProc is one `monolock run`, its output in a file: no pipe that a
// surviving process could hold open.
type runProc struct {
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
}

func startRun(t *testing.T, dir string, args ...string) *runProc {
	log := filepath.Join(dir, "run.log")
	out, err := os.Create(log)
	require.NoError(t, err)
	defer out.Close()
	cmd := exec.Command(monolockBin, append([]string{"run"}, args...)...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, out, out
	require.NoError(t, cmd.Start())
	r := &runProc{cmd: cmd, log: log, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(r.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-r.exited
	})
	return r
}

func (r *runProc) output() string {
	b, _ := os.ReadFile(r.log)
	return string(b)
}

// wait returns the exit status, failing the test after d.
func (r *runProc) wait(t *testing.T, d time.Duration) int {
	select {
	case <-r.exited:
		return r.cmd.ProcessState.ExitCode()
	case <-time.After(d):
		t.Fatalf("monolock run did not exit within %v:\n%s", d, r.output())
		return -1
	}
}

// proc is one process of the command: its pid and start time, which tell
// it from a later process that reuses the pid.
type proc struct {
	pid   int
	start string
}

// stat returns the process's state and whether it is still there (alive
// or a zombie not yet reaped).
func (p proc) stat() (state string, there bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/stat")
	if err != nil {
		return "", false
	}
	f := statFields(b)
	if len(f) < 20 || f[19] != p.start {
		return "", false // the pid belongs to someone else now
	}
	return f[0], true
}

func (p proc) running() bool {
	state, there := p.stat()
	return there && state != "Z"
}

// statFields are the fields of /proc/PID/stat after the command name,
// which may hold spaces: state first, the start time at index 19.
func statFields(b []byte) []string {
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
}

// waitProcs waits until the command has written want pids, and returns
// its processes. Any left at the end of the test are killed.
func waitProcs(t *testing.T, dir string, want int, exited <-chan struct{}, output func() string) []proc {
	deadline := time.Now().Add(slack)
	var lines []string
	for len(lines) < want {
		select {
		case <-exited:
			t.Fatalf("monolock run exited before the command was ready:\n%s", output())
		default:
		}
		require.True(t, time.Now().Before(deadline), "the command did not start its processes:\n%s", output())
		time.Sleep(10 * time.Millisecond)
		b, _ := os.ReadFile(filepath.Join(dir, "pids"))
		lines = strings.Fields(string(b))
	}
	procs := make([]proc, 0, len(lines))
	for _, l := range lines {
		pid, err := strconv.Atoi(l)
		require.NoError(t, err)
		b, err := os.ReadFile("/proc/" + l + "/stat")
		require.NoError(t, err, "pid %d", pid)
		procs = append(procs, proc{pid: pid, start: statFields(b)[19]})
	}
	t.Cleanup(func() {
		for _, p := range procs {
			if _, there := p.stat(); there {
				_ = syscall.Kill(p.pid, syscall.SIGKILL)
			}
		}
	})
	return procs
}

// grant is what the waiter saw: when it was granted, and which processes
// of the command were still there at that moment.
type grant struct {
	at        time.Time
	survivors []string
	err       error
}

// queueWaiter queues a second claim on name directly at the server and
// returns once the server has answered it WAITING. At its grant it looks
// at procs at once, before anything else.
func queueWaiter(t *testing.T, addr, name string, procs []proc) <-chan grant {
	queued := make(chan struct{})
	var once sync.Once
	c, err := client.New(client.WithServers(addr), client.WithLease(10*time.Second),
		client.WithOnWaiting(func(string) { once.Do(func() { close(queued) }) }))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*lease+delay+2*slack)
	t.Cleanup(cancel)
	out := make(chan grant, 1)
	go func() {
		lock, err := c.Acquire(ctx, name)
		g := grant{at: time.Now(), err: err}
		if err == nil {
			g.survivors = survivors(procs)
			lock.Release()
		}
		out <- g
	}()
	select {
	case <-queued:
	case g := <-out:
		t.Fatalf("the waiter did not queue: granted at once or failed (err %v)", g.err)
	case <-time.After(slack):
		t.Fatal("the waiter did not queue")
	}
	return out
}

// survivors describes every process of procs that is still there.
func survivors(procs []proc) []string {
	var out []string
	for _, p := range procs {
		if state, there := p.stat(); there {
			out = append(out, fmt.Sprintf("pid %d in state %s", p.pid, state))
		}
	}
	return out
}
