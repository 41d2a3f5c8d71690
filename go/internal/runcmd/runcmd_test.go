//go:build unix

package runcmd

// Unit tests of the command line, and tests of the real monolock binary
// against the real server (monolock serve).

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/testbin"
	"github.com/monolock/monolock/go/internal/testcerts"
)

// wait bounds every event-driven wait: generous for a loaded machine.
const wait = 10 * time.Second

var (
	monolockBin string // monolock run is the code under test: built from this tree
	serverBin   string // $MONOLOCK_BIN when set, else monolockBin
)

func TestMain(m *testing.M) {
	os.Exit(testbin.Run(m, func(dir string) (string, error) {
		bin, err := testbin.Build(dir)
		serverBin = cmp.Or(os.Getenv("MONOLOCK_BIN"), bin)
		return bin, err
	}, &monolockBin))
}

func TestParse(t *testing.T) {
	t.Setenv("MONOLOCK_SERVER", "")
	o, err := parse([]string{"--no-wait", "--server", "a:1,b:2", "--server=c:3", "--lease", "2s", "--timeout=3s", "--conflict-exit-code", "9", "jobs/x", "--", "cmd", "-x", "--", "y"}, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"a:1", "b:2", "c:3"}, o.servers)
	assert.True(t, o.noWait)
	assert.Equal(t, 2*time.Second, o.lease)
	assert.Equal(t, 3*time.Second, o.timeout)
	assert.Equal(t, 9, o.conflictCode)
	assert.Equal(t, "jobs/x", o.name)
	assert.Equal(t, []string{"cmd", "-x", "--", "y"}, o.command)

	o, err = parse([]string{"n", "true"}, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"127.0.0.1:7117"}, o.servers)
	assert.Equal(t, ExitConflict, o.conflictCode)
	assert.Equal(t, []string{"true"}, o.command)

	t.Setenv("MONOLOCK_SERVER", "env:1")
	o, err = parse([]string{"n", "--", "true"}, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"env:1"}, o.servers)
	o, err = parse([]string{"--server", "flag:1", "n", "--", "true"}, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"flag:1"}, o.servers, "--server replaces $MONOLOCK_SERVER")

	// As flock users type them: bare numbers are seconds, -n, -w, -E.
	o, err = parse([]string{"-n", "-w", "2.5", "-E", "3", "--lease", "0.0015", "--grace", "1", "--dial-timeout", "250ms", "n", "--", "true"}, nil)
	require.NoError(t, err)
	assert.True(t, o.noWait)
	assert.Equal(t, 2500*time.Millisecond, o.timeout)
	assert.Equal(t, 3, o.conflictCode)
	assert.Equal(t, 1500*time.Microsecond, o.lease, "exactly, for the lease rule to refuse it")
	assert.Equal(t, time.Second, o.grace)
	assert.True(t, o.graceGiven)
	assert.Equal(t, 250*time.Millisecond, o.dialTimeout)
	o, err = parse([]string{"--timeout", "5", "n", "--", "true"}, nil)
	require.NoError(t, err)
	assert.Equal(t, 5*time.Second, o.timeout)
	assert.False(t, o.noWait)
	o, err = parse([]string{"-w", "0", "n", "--", "true"}, nil)
	require.NoError(t, err)
	assert.True(t, o.noWait, "-w 0 does not wait, as with flock")

	_, err = parse([]string{"n", "--no-wait", "--", "true"}, nil)
	require.ErrorContains(t, err, "flags go before the lock name")
	_, err = parse([]string{"n", "-n", "true"}, nil)
	require.ErrorContains(t, err, "flags go before the lock name")

	for _, bad := range [][]string{
		{}, {"n"}, {"n", "--"}, {"--bogus", "n", "--", "true"}, {"--timeout", "-1s", "n", "--", "true"},
		{"--timeout", "5x", "n", "--", "true"}, {"--lease", "1e3", "n", "--", "true"},
		{"--conflict-exit-code", "256", "n", "--", "true"}, {"--tls-cert", "c", "n", "--", "true"},
		{"--server", ",", "n", "--", "true"}, {"--log-format", "xml", "n", "--", "true"},
	} {
		_, err := parse(bad, nil)
		assert.Error(t, err, "%q", bad)
	}
}

func TestDisplayName(t *testing.T) {
	assert.Equal(t, `"jobs/x"`, displayName("jobs/x"))
	long := strings.Repeat("é", 300)
	assert.Equal(t, strconv.Quote(strings.Repeat("é", 40))+"…", displayName(long))
	assert.Equal(t, strings.Repeat("é", 40)+"…", logName(long))
	assert.Equal(t, strings.Repeat("é", 40), logName(strings.Repeat("é", 40)))
}

func TestHelpListsExitStatuses(t *testing.T) {
	var out bytes.Buffer
	require.Equal(t, 0, Main([]string{"-h"}, &out, &out))
	for _, code := range []int{ExitUsage, ExitUnavailable, ExitConflict, ExitRefused, ExitLockLost, ExitInternal, ExitCannotExec, ExitNotFound} {
		assert.Contains(t, out.String(), fmt.Sprintf("\n  %d ", code))
	}
	assert.Contains(t, out.String(), "\n  128+S ")
	assert.Contains(t, out.String(), "\n  -n, --no-wait\n")
	assert.Contains(t, out.String(), "\n  -w D, --timeout D\n")
	assert.NotContains(t, out.String(), "\n  -w D\n", "a short flag listed on its own")
	assert.Contains(t, out.String(), "MONOLOCK_TOKEN")
}

// startServer runs a real `monolock serve` (admin API off) on a free
// loopback port.
func startServer(t *testing.T, extra ...string) *testbin.Server {
	t.Helper()
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--admin", "off"}, extra...)
	srv := testbin.Start(t, wait, exec.Command(serverBin, args...))
	// A test may have stopped it with SIGSTOP: wake it before the kill.
	t.Cleanup(func() { _ = srv.Cmd.Process.Signal(syscall.SIGCONT) })
	return srv
}

// runProc is one `monolock run` process.
type runProc struct {
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan struct{}
}

type syncBuffer struct {
	mu chanMutex
	b  bytes.Buffer
}

// chanMutex is a mutex usable from the exec package's copying goroutine.
type chanMutex chan struct{}

func (m chanMutex) lock()   { m <- struct{}{} }
func (m chanMutex) unlock() { <-m }

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.lock()
	defer b.mu.unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.lock()
	defer b.mu.unlock()
	return b.b.String()
}

func startRun(t *testing.T, dir string, args ...string) *runProc {
	t.Helper()
	return startRunWith(t, dir, nil, args...)
}

func startRunWith(t *testing.T, dir string, attr *syscall.SysProcAttr, args ...string) *runProc {
	t.Helper()
	cmd := exec.Command(monolockBin, append([]string{"run"}, args...)...)
	cmd.Dir = dir
	cmd.SysProcAttr = attr
	out := &syncBuffer{mu: make(chanMutex, 1)}
	cmd.Stdout, cmd.Stderr = out, out
	// A command orphaned by a failed test may hold the output pipe open.
	cmd.WaitDelay = time.Second
	require.NoError(t, cmd.Start())
	p := &runProc{cmd: cmd, out: out, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		// SIGTERM is forwarded to the command's whole process group; a
		// stopped monolock run acts on it once continued.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Process.Signal(syscall.SIGCONT)
		select {
		case <-p.exited:
		case <-time.After(wait):
			_ = cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// status waits for the run to exit and returns its exit status.
func (p *runProc) status(t *testing.T) int {
	t.Helper()
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(wait):
		t.Fatalf("monolock run did not exit; output:\n%s", p.out.String())
		return -1
	}
}

func run(t *testing.T, dir string, args ...string) (int, string) {
	t.Helper()
	p := startRun(t, dir, args...)
	return p.status(t), p.out.String()
}

// waitFile waits until path exists and is not empty, and returns its content.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 && bytes.HasSuffix(b, []byte("\n")) {
			return string(b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s was not written", path)
	return ""
}

func TestRunExportsTokenAndExitStatus(t *testing.T) {
	srv := startServer(t)
	code, out := run(t, t.TempDir(), "--server", srv.Addr, "jobs/a", "--", "sh", "-c", `echo "token=$MONOLOCK_TOKEN name=$MONOLOCK_NAME"; exit 3`)
	require.Equal(t, 3, code, out)
	m := regexp.MustCompile(`token=(\d+) name=jobs/a`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	first, _ := strconv.ParseUint(m[1], 10, 64)

	code, out = run(t, t.TempDir(), "--server", srv.Addr, "jobs/a", "--", "sh", "-c", `echo "token=$MONOLOCK_TOKEN"`)
	require.Equal(t, 0, code, out)
	m = regexp.MustCompile(`token=(\d+)`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	second, _ := strconv.ParseUint(m[1], 10, 64)
	assert.Greater(t, second, first)
}

func TestRunCommandStatuses(t *testing.T) {
	srv := startServer(t)
	dir := t.TempDir()
	code, out := run(t, dir, "--server", srv.Addr, "s", "--", "sh", "-c", "kill -KILL $$")
	assert.Equal(t, 128+9, code, out)
	code, out = run(t, dir, "--server", srv.Addr, "s", "--", "/nonexistent/command")
	assert.Equal(t, ExitNotFound, code, out)
	code, out = run(t, dir, "--server", srv.Addr, "s", "--", "/dev/null")
	assert.Equal(t, ExitCannotExec, code, out)
	code, out = run(t, dir, "--server", srv.Addr, "", "--", "true")
	assert.Equal(t, ExitUsage, code, out)
	assert.Contains(t, out, "0x14")
	code, out = run(t, dir, "--server", srv.Addr, "--lease", "0s", "s", "--", "true")
	assert.Equal(t, ExitUsage, code, out)
	code, out = run(t, dir, "--bogus")
	assert.Equal(t, ExitUsage, code, out)
}

func TestRunConnectionNotInherited(t *testing.T) {
	srv := startServer(t)
	code, out := run(t, t.TempDir(), "--server", srv.Addr, "fd", "--", "sh", "-c", `ls -l /proc/$$/fd/`)
	require.Equal(t, 0, code, out)
	assert.NotContains(t, out, "socket:", "the command inherited a socket")
	assert.Contains(t, out, "pipe:", "sanity: the listing shows the descriptors")
}

// TestRunSecondWaitsForFirst: the second run starts its command only after
// the first one's command has finished.
func TestRunSecondWaitsForFirst(t *testing.T) {
	srv := startServer(t)
	dir := t.TempDir()
	script := `echo "$1 start $(date +%s%N)" >> log; sleep 0.4; echo "$1 end $(date +%s%N)" >> log`
	first := startRun(t, dir, "--server", srv.Addr, "serial", "--", "sh", "-c", script, "sh", "first")
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "log"))
		return strings.Contains(string(b), "first start")
	}, wait, 5*time.Millisecond)
	second := startRun(t, dir, "--server", srv.Addr, "-v", "serial", "--", "sh", "-c", script, "sh", "second")
	require.Equal(t, 0, first.status(t), first.out.String())
	require.Equal(t, 0, second.status(t), second.out.String())
	b, err := os.ReadFile(filepath.Join(dir, "log"))
	require.NoError(t, err)
	var order []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		order = append(order, f[0]+" "+f[1])
	}
	require.Equal(t, []string{"first start", "first end", "second start", "second end"}, order)
	assert.Contains(t, second.out.String(), "waiting for the lock")
}

func TestRunNoWaitAndTimeout(t *testing.T) {
	srv := startServer(t)
	dir := t.TempDir()
	holder := startRun(t, dir, "--server", srv.Addr, "busy", "--", "sh", "-c", "echo held > held; sleep 30")
	waitFile(t, filepath.Join(dir, "held"))

	code, out := run(t, dir, "--server", srv.Addr, "--no-wait", "busy", "--", "touch", "ran")
	assert.Equal(t, ExitConflict, code, out)
	code, out = run(t, dir, "--server", srv.Addr, "-n", "-E", "3", "busy", "--", "touch", "ran")
	assert.Equal(t, 3, code, out)
	for _, timeout := range [][]string{{"--timeout", "300ms"}, {"-w", "0.3"}} {
		start := time.Now()
		code, out = run(t, dir, append(append([]string{"--server", srv.Addr}, timeout...), "busy", "--", "touch", "ran")...)
		assert.Equal(t, ExitConflict, code, out)
		assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
	}
	assert.NoFileExists(t, filepath.Join(dir, "ran"))

	// Signals go to the command; its status becomes ours; the lock is freed.
	require.NoError(t, holder.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 128+int(syscall.SIGTERM), holder.status(t), holder.out.String())
	code, out = run(t, dir, "--server", srv.Addr, "--no-wait", "busy", "--", "touch", "ran")
	assert.Equal(t, 0, code, out)
	assert.FileExists(t, filepath.Join(dir, "ran"))
}

func TestRunSignalForwardedToCommand(t *testing.T) {
	srv := startServer(t)
	dir := t.TempDir()
	p := startRun(t, dir, "--server", srv.Addr, "sig", "--", "sh", "-c",
		`trap 'echo got INT; exit 7' INT; echo ready > ready; while :; do sleep 0.05; done`)
	waitFile(t, filepath.Join(dir, "ready"))
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	assert.Equal(t, 7, p.status(t), p.out.String())
	assert.Contains(t, p.out.String(), "got INT")
}

func TestRunSignalWhileWaiting(t *testing.T) {
	srv := startServer(t)
	dir := t.TempDir()
	startRun(t, dir, "--server", srv.Addr, "w", "--", "sh", "-c", "echo held > held; sleep 30")
	waitFile(t, filepath.Join(dir, "held"))
	p := startRun(t, dir, "--server", srv.Addr, "-v", "w", "--", "touch", "ran")
	require.Eventually(t, func() bool { return strings.Contains(p.out.String(), "waiting for the lock") }, wait, 5*time.Millisecond)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	assert.Equal(t, 128+int(syscall.SIGINT), p.status(t), p.out.String())
	assert.NoFileExists(t, filepath.Join(dir, "ran"))
}

func TestRunServerUnreachable(t *testing.T) {
	srv := startServer(t)
	require.NoError(t, srv.Cmd.Process.Kill())
	<-srv.Exited()
	code, out := run(t, t.TempDir(), "--server", srv.Addr, "--no-wait", "u", "--", "true")
	assert.Equal(t, ExitUnavailable, code, out)
	code, out = run(t, t.TempDir(), "--server", srv.Addr, "--timeout", "300ms", "u", "--", "true")
	assert.Equal(t, ExitUnavailable, code, out)
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// TestRunLostLockKillsEverything: the server goes silent (SIGSTOP), the
// lock is lost after 0.8 x lease, and everything the command started goes
// before the lease ends: the command gets SIGTERM, a child that ignores it
// gets SIGKILL, and so does a daemon that left the process group (setsid
// after a double fork) and ignores SIGTERM too.
func TestRunLostLockKillsEverything(t *testing.T) {
	srv := startServer(t)
	dir := t.TempDir()
	const lease = 2 * time.Second
	p := startRun(t, dir, "--server", srv.Addr, "--lease", lease.String(), "lost", "--", "sh", "-c",
		`(trap '' TERM; exec sleep 300) & echo $! > grandchild
		(setsid sh -c 'trap "" TERM; echo $$ > daemon; exec sleep 300' &)
		sleep 300 & echo $! > child; wait`)
	var pids []int
	for _, name := range []string{"grandchild", "daemon", "child"} {
		pid, err := strconv.Atoi(strings.TrimSpace(waitFile(t, filepath.Join(dir, name))))
		require.NoError(t, err)
		require.True(t, alive(pid), name)
		pids = append(pids, pid)
	}

	require.NoError(t, srv.Cmd.Process.Signal(syscall.SIGSTOP))
	stopped := time.Now()
	require.Equal(t, ExitLockLost, p.status(t), p.out.String())
	took := time.Since(stopped)
	assert.Contains(t, p.out.String(), "lost")
	assert.Regexp(t, `(?m)^monolock run: command stopped: \d+ processes dead and reaped \(\d+ needed SIGKILL\)`, p.out.String())
	// Reaped, not only dead: monolock run waited for each of them (the
	// daemon is its child as their subreaper).
	for _, pid := range pids {
		assert.NoDirExists(t, fmt.Sprintf("/proc/%d", pid), "pid %d survived monolock run", pid)
	}
	// Within the lease of the silence; generous slack for a loaded machine.
	assert.Less(t, took, lease+5*time.Second)
}

// TestRunLostLockTermIsEnough: a group that obeys SIGTERM is not kept
// waiting for the grace period.
func TestRunLostLockTermIsEnough(t *testing.T) {
	srv := startServer(t)
	dir := t.TempDir()
	// A lease of a minute: the default grace is 8.75 s.
	p := startRun(t, dir, "--server", srv.Addr, "--lease", "60s", "lost2", "--", "sh", "-c",
		`sleep 300 & echo $! > child; wait`)
	child, err := strconv.Atoi(strings.TrimSpace(waitFile(t, filepath.Join(dir, "child"))))
	require.NoError(t, err)
	require.NoError(t, srv.Cmd.Process.Kill()) // connection reset: lost at once
	start := time.Now()
	require.Equal(t, ExitLockLost, p.status(t), p.out.String())
	assert.Regexp(t, `(?m)^monolock run: lock lost: `, p.out.String())
	assertHumanLines(t, p.out.String())
	assert.Less(t, time.Since(start), 5*time.Second, "waited for the grace period although the group had exited")
	assert.False(t, alive(child))
}

// A --grace or --lease that leaves no time for the kill is refused before
// anything runs, with the lease that would fit.
func TestRunRefusesGraceThatCannotFit(t *testing.T) {
	srv := startServer(t)
	dir := t.TempDir()
	code, out := run(t, dir, "--server", srv.Addr, "--grace", "10s", "g", "--", "touch", "ran")
	assert.Equal(t, ExitUsage, code, out)
	assert.Contains(t, out, "monolock run: --grace 10s does not fit --lease 10s")
	assert.Contains(t, out, "use --lease 1m8.334s or more for this --grace, or --grace 1.25s at most with this lease")
	code, out = run(t, dir, "--server", srv.Addr, "--lease", "1s", "g", "--", "touch", "ran")
	assert.Equal(t, ExitUsage, code, out)
	assert.Contains(t, out, "monolock run: --lease 1s is too short for monolock run")
	assert.Contains(t, out, "use --lease 1.667s or more")
	assertHumanLines(t, out)
	assert.NoFileExists(t, filepath.Join(dir, "ran"))
}

// A lease that no round trip fits (1 ms) is refused before anything is
// sent, with the lease that would fit, instead of a lock lost at once.
func TestRunRefusesALeaseNoRoundTripFits(t *testing.T) {
	dir := t.TempDir()
	code, out := run(t, dir, "--server", "127.0.0.1:1", "--lease", "1ms", "g", "--", "touch", "ran")
	assert.Equal(t, ExitUsage, code, out)
	assert.Equal(t, "monolock run: --lease 1ms is too short for monolock run: a lost lock leaves 0.2 x lease = 200µs before the server can grant it to anyone else, less than the 250ms that SIGKILL needs to finish plus the 0.05 x lease = 50µs kept between this command's end and the next holder's start; use --lease 1.667s or more\n", out)
	assert.NoFileExists(t, filepath.Join(dir, "ran"))
}

// TestRunKilledTakesCommandAlong: a SIGKILL of monolock run frees the lock
// on the server, so the command must not go on (Linux: parent-death signal).
func TestRunKilledTakesCommandAlong(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("parent-death signals are Linux only")
	}
	srv := startServer(t)
	dir := t.TempDir()
	p := startRun(t, dir, "--server", srv.Addr, "killed", "--", "sh", "-c", `echo $$ > pid; while :; do sleep 0.05; done`)
	pid, err := strconv.Atoi(strings.TrimSpace(waitFile(t, filepath.Join(dir, "pid"))))
	require.NoError(t, err)
	require.NoError(t, p.cmd.Process.Kill())
	p.status(t)
	require.Eventually(t, func() bool { return !alive(pid) }, wait, 10*time.Millisecond)
}

// An ACL refusal is said once, with the lock's name: not the code's text
// twice ("not authorized for lock: not authorized for lock: ...").
func TestRunACLRefusalNamesTheLockOnce(t *testing.T) {
	dir := t.TempDir()
	aclPath := filepath.Join(dir, "acl")
	require.NoError(t, os.WriteFile(aclPath, []byte("anonymous public/*\n"), 0o600))
	srv := startServer(t, "--acl", aclPath)
	code, out := run(t, dir, "--server", srv.Addr, "secret/x", "--", "touch", "ran")
	assert.Equal(t, ExitRefused, code, out)
	assert.Equal(t, "monolock run: cannot take the lock \"secret/x\": not authorized for lock: no ACL rule lets anonymous take it (0x18)\n", out)
	assert.NoFileExists(t, filepath.Join(dir, "ran"))
}

// TestRunMutualTLSAndACL: run speaks TLS with a client certificate; the
// server's ACL grants by certificate name, and a refusal is status 76.
func TestRunMutualTLSAndACL(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "monolock test CA")
	caPath := ca.Write(t, dir, "ca")
	srvCert, srvKey := ca.Issue(t, testcerts.Spec{CN: "server", Server: true}).Write(t, dir, "server")
	cliCert, cliKey := ca.Issue(t, testcerts.Spec{CN: "deployer"}).Write(t, dir, "client")
	aclPath := filepath.Join(dir, "acl")
	require.NoError(t, os.WriteFile(aclPath, []byte("cn:deployer deploy/*\n"), 0o600))
	srv := startServer(t, "--tls-cert", srvCert, "--tls-key", srvKey, "--tls-client-ca", caPath, "--acl", aclPath)

	tlsFlags := []string{"--server", srv.Addr, "--tls-ca", caPath, "--tls-cert", cliCert, "--tls-key", cliKey}
	code, out := run(t, dir, append(tlsFlags, "deploy/web", "--", "sh", "-c", `echo "token=$MONOLOCK_TOKEN"`)...)
	require.Equal(t, 0, code, out)
	assert.Regexp(t, `token=\d+`, out)

	code, out = run(t, dir, append(tlsFlags, "other/web", "--", "touch", "ran")...)
	assert.Equal(t, ExitRefused, code, out)
	assert.Contains(t, out, "0x18")
	assert.NoFileExists(t, filepath.Join(dir, "ran"))

	// Without a client certificate the handshake fails: no server to talk to.
	code, out = run(t, dir, "--server", srv.Addr, "--tls-ca", caPath, "--no-wait", "deploy/web", "--", "touch", "ran")
	assert.Equal(t, ExitUnavailable, code, out)
	// Without trusting the server's CA either.
	code, out = run(t, dir, "--server", srv.Addr, "--tls", "--tls-cert", cliCert, "--tls-key", cliKey, "--no-wait", "deploy/web", "--", "touch", "ran")
	assert.Equal(t, ExitUnavailable, code, out)
	assert.NoFileExists(t, filepath.Join(dir, "ran"))
	// Waiting does not help a certificate problem: both fail at once, with
	// the side that refused, long before --timeout.
	for _, tc := range []struct {
		flags []string
		hint  string
	}{
		{[]string{"--tls-ca", caPath}, "the server refused this client's certificate"},
		{[]string{"--tls", "--tls-cert", cliCert, "--tls-key", cliKey}, "the server's certificate is not trusted"},
	} {
		start := time.Now()
		code, out = run(t, dir, append(append([]string{"--server", srv.Addr}, tc.flags...), "-w", "60", "deploy/web", "--", "touch", "ran")...)
		assert.Equal(t, ExitUnavailable, code, out)
		assert.Contains(t, out, tc.hint)
		assert.Less(t, time.Since(start), 30*time.Second, "at once, not after -w 60")
	}
	assert.NoFileExists(t, filepath.Join(dir, "ran"))

	code, out = run(t, dir, "--server", srv.Addr, "--tls-ca", filepath.Join(dir, "missing.pem"), "x", "--", "true")
	assert.Equal(t, ExitUsage, code, out)
}

// assertHumanLines checks the lines monolock run writes for a person:
// plain text with one prefix, not slog's key=value.
func assertHumanLines(t *testing.T, out string) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "monolock") {
			continue // the command's own output
		}
		assert.True(t, strings.HasPrefix(line, "monolock run: "), "line %q", line)
		assert.NotContains(t, line, "monolock: ", "a second prefix")
		assert.NotContains(t, line, "level=", "slog's text format")
	}
}

func TestRunTellsAcquiredOnceInPlainLines(t *testing.T) {
	srv := startServer(t)
	code, out := run(t, t.TempDir(), "--server", srv.Addr, "-v", "plain", "--", "true")
	require.Equal(t, 0, code, out)
	assert.Equal(t, 1, strings.Count(out, "acquired"), out)
	assert.Regexp(t, `(?m)^monolock run: acquired "plain", token \d+$`, out)
	assertHumanLines(t, out)

	code, out = run(t, t.TempDir(), "--server", srv.Addr, "-v", "--log-format", "json", "plain", "--", "true")
	require.Equal(t, 0, code, out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.NotEmpty(t, lines)
	for _, line := range lines {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec), "not JSON: %q", line)
		assert.Equal(t, "plain", rec["lock"])
	}
	assert.Equal(t, 1, strings.Count(out, "acquired"), out)
}

// Input the server would refuse is told with what is wrong with it,
// without echoing a long name in full, before any connection.
func TestRunRefusesBadInputClearly(t *testing.T) {
	srv := startServer(t)
	dir := t.TempDir()
	code, out := run(t, dir, "--server", srv.Addr, "--lease", "0.0015", "x", "--", "touch", "ran")
	assert.Equal(t, ExitUsage, code, out)
	assert.Contains(t, out, "monolock run: lease must be a whole number of milliseconds from 1 ms to 4294967295 ms, got 1.5ms (0x17)")
	code, out = run(t, dir, "--server", srv.Addr, "--lease", "1.5ms", "x", "--", "touch", "ran")
	assert.Equal(t, ExitUsage, code, out)
	assert.Contains(t, out, "got 1.5ms (0x17)")

	code, out = run(t, dir, "--server", srv.Addr, strings.Repeat("n", 300), "--", "touch", "ran")
	assert.Equal(t, ExitUsage, code, out)
	assert.Contains(t, out, "(300 bytes, the limit is 255)")
	assert.NotContains(t, out, strings.Repeat("n", 41))
	assertHumanLines(t, out)

	code, out = run(t, dir, "--server", "host:0", "x", "--", "touch", "ran")
	assert.Equal(t, ExitUsage, code, out)
	assert.Contains(t, out, `monolock run: server address "host:0"`)

	code, out = run(t, dir, "--server", srv.Addr, "x", "--no-wait", "--", "touch", "ran")
	assert.Equal(t, ExitUsage, code, out)
	assert.Contains(t, out, "flags go before the lock name")
	assert.NoFileExists(t, filepath.Join(dir, "ran"))
}

// A port that is not monolock, or TLS to a plaintext server: one line that
// says so, and status 69 (no server could be reached).
func TestRunWrongPortSaysSo(t *testing.T) {
	addr := fakeServer(t, func(conn net.Conn) {
		_, _ = conn.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
	})
	start := time.Now()
	code, out := run(t, t.TempDir(), "--server", addr, "x", "--", "true")
	assert.Equal(t, ExitUnavailable, code, out)
	assert.Less(t, time.Since(start), wait/2, "waited although the port is not monolock")
	assert.Contains(t, out, "monolock run: no server available: "+addr+` does not speak the monolock protocol (it sent "HTTP/1.1 400…"); is this the admin port?`)
	assertHumanLines(t, out)

	srv := startServer(t)
	code, out = run(t, t.TempDir(), "--server", srv.Addr, "--tls", "-n", "x", "--", "true")
	assert.Equal(t, ExitUnavailable, code, out)
	assert.Contains(t, out, "TLS handshake with "+srv.Addr+" failed; the server may not speak TLS")
	assertHumanLines(t, out)
}
