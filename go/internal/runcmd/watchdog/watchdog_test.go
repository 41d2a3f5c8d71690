//go:build linux

package watchdog

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/monolock/monolock/go/internal/proctree"
)

// wait bounds every wait for an event: generous for a loaded machine. It
// never decides what is accepted.
const wait = 20 * time.Second

// The test binary is also the watchdog, as the monolock binary is: Start
// runs it again with the subcommand.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == Subcommand {
		os.Exit(Main(os.Args[2:]))
	}
	// The test process reaps the watchdogs it starts, as monolock run
	// does; it is no subreaper, so nothing else comes to it.
	os.Exit(m.Run())
}

// started is a running watchdog of a test, and the reaping of it.
type started struct {
	*Watchdog
	gone   chan struct{} // closed when the watchdog is reaped
	status unix.WaitStatus
}

func start(t *testing.T, dir string, killAt time.Time, script string) *started {
	t.Helper()
	wd, err := Start(Spec{Exe: os.Args[0], Argv: []string{"sh", "-c", script}, Env: os.Environ(), KillAt: killAt, Dir: dir})
	require.NoError(t, err)
	s := &started{Watchdog: wd, gone: make(chan struct{})}
	go func() {
		defer close(s.gone)
		for {
			_, err := unix.Wait4(wd.Pid, &s.status, 0, nil)
			if err != syscall.EINTR {
				return
			}
		}
	}()
	t.Cleanup(func() {
		wd.Close() // without a release: the watchdog kills what is left
		select {
		case <-s.gone:
		case <-time.After(wait):
			_ = syscall.Kill(wd.Pid, syscall.SIGKILL)
		}
	})
	return s
}

// next returns the next event, failing the test after wait.
func (s *started) next(t *testing.T) Event {
	t.Helper()
	select {
	case ev, ok := <-s.Events:
		require.True(t, ok, "the watchdog went without an event")
		return ev
	case <-time.After(wait):
		t.Fatal("no event from the watchdog")
		return Event{}
	}
}

// exited waits for the watchdog's own end and checks its status.
func (s *started) exited(t *testing.T) {
	t.Helper()
	select {
	case <-s.gone:
		require.True(t, s.status.Exited() && s.status.ExitStatus() == 0, "watchdog status %v", s.status)
	case <-time.After(wait):
		t.Fatal("the watchdog did not end")
	}
}

// treeScript starts a tree that ignores SIGTERM, with a daemon that left
// the group and the tree (setsid, double fork); every process writes its
// pid to ./pids.
const treeScript = `trap '' TERM
echo $$ >> pids
sleep 300 & echo $! >> pids
(setsid sh -c 'echo $$ >> pids; exec sleep 300' &)
wait`

// pids waits until ./pids has n lines and returns the processes.
func pids(t *testing.T, dir string, n int) []proctree.Proc {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		b, _ := os.ReadFile(filepath.Join(dir, "pids"))
		if f := strings.Fields(string(b)); len(f) == n {
			var out []proctree.Proc
			for _, s := range f {
				pid, err := strconv.Atoi(s)
				require.NoError(t, err)
				p, err := proctree.Read(pid)
				require.NoError(t, err)
				out = append(out, p)
			}
			return out
		}
		require.True(t, time.Now().Before(deadline), "the tree did not start")
		time.Sleep(5 * time.Millisecond)
	}
}

// there reports whether p is still there, alive or not yet reaped.
func there(p proctree.Proc) bool { return proctree.Same(p) }

func TestDeadlineKillsTheWholeTree(t *testing.T) {
	dir := t.TempDir()
	killAt := time.Now().Add(500 * time.Millisecond)
	s := start(t, dir, killAt, treeScript)
	procs := pids(t, dir, 3)

	ev := s.next(t)
	require.Equal(t, Killing, ev.Kind)
	assert.False(t, time.Now().Before(killAt), "killed before the deadline")
	ev = s.next(t)
	require.Equal(t, Exited, ev.Kind)
	assert.True(t, ev.Wait.Signaled() && ev.Wait.Signal() == syscall.SIGKILL, "the command ended by %v", ev.Wait)
	ev = s.next(t)
	require.Equal(t, Killed, ev.Kind)
	assert.Equal(t, 3, ev.Count)
	s.exited(t)
	for _, p := range procs {
		assert.False(t, there(p), "pid %d (%s) outlived the watchdog", p.Pid, p.Comm)
	}
}

func TestMovedDeadlineAndRunsEnd(t *testing.T) {
	dir := t.TempDir()
	first := time.Now().Add(3 * time.Second)
	s := start(t, dir, first, treeScript)
	procs := pids(t, dir, 3)
	s.KillAt(time.Now().Add(time.Hour))
	// Past the first deadline, everything still runs.
	time.Sleep(time.Until(first) + 500*time.Millisecond)
	for _, p := range procs {
		require.True(t, there(p), "pid %d was killed at the deadline that had moved", p.Pid)
	}
	// monolock run goes away without a release: the kill comes at once.
	s.Close()
	require.Equal(t, Killing, s.next(t).Kind)
	require.Equal(t, Exited, s.next(t).Kind)
	require.Equal(t, Killed, s.next(t).Kind)
	s.exited(t)
	for _, p := range procs {
		assert.False(t, there(p), "pid %d outlived the watchdog", p.Pid)
	}
}

func TestReleaseLeavesWhatTheCommandLeft(t *testing.T) {
	dir := t.TempDir()
	s := start(t, dir, time.Now().Add(time.Hour), `(setsid sh -c 'echo $$ >> pids; exec sleep 300' &); while ! test -s pids; do sleep 0.01; done`)
	daemon := pids(t, dir, 1)[0]
	t.Cleanup(func() { proctree.Signal(daemon, syscall.SIGKILL) })
	ev := s.next(t)
	require.Equal(t, Exited, ev.Kind)
	assert.Equal(t, 0, ev.Wait.ExitStatus())
	s.Release()
	s.exited(t)
	require.True(t, there(daemon), "the daemon the command left was killed after the release")
}

func TestTheWatchdogIgnoresJobAndTerminalSignals(t *testing.T) {
	dir := t.TempDir()
	s := start(t, dir, time.Now().Add(time.Hour), `echo $$ >> pids; exec sleep 300`)
	procs := pids(t, dir, 1)
	for _, sig := range []syscall.Signal{syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP, syscall.SIGTERM} {
		require.NoError(t, syscall.Kill(s.Pid, sig))
	}
	// It still answers, and still kills: a deadline in the past.
	s.KillAt(time.Now())
	require.Equal(t, Killing, s.next(t).Kind)
	p, err := proctree.Read(s.Pid)
	if err == nil {
		assert.NotEqual(t, byte('T'), p.State, "the watchdog was stopped")
	}
	require.Equal(t, Exited, s.next(t).Kind)
	require.Equal(t, Killed, s.next(t).Kind)
	s.exited(t)
	assert.False(t, there(procs[0]))
}

func TestStopOfTheCommandIsTold(t *testing.T) {
	dir := t.TempDir()
	s := start(t, dir, time.Now().Add(time.Hour), `echo $$ >> pids; exec sleep 300`)
	pids(t, dir, 1)
	require.NoError(t, syscall.Kill(s.Command, syscall.SIGSTOP))
	require.Equal(t, Stopped, s.next(t).Kind)
	require.NoError(t, syscall.Kill(s.Command, syscall.SIGKILL))
	ev := s.next(t)
	require.Equal(t, Exited, ev.Kind)
	s.Release()
	s.exited(t)
}

func TestACommandThatCannotStart(t *testing.T) {
	_, err := Start(Spec{Exe: os.Args[0], Argv: []string{"monolock-no-such-command"}, Env: os.Environ(), KillAt: time.Now().Add(time.Hour)})
	var se *StartError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, 127, se.Status)
	assert.Contains(t, se.Error(), "executable file not found")

	dir := t.TempDir()
	_, err = Start(Spec{Exe: os.Args[0], Argv: []string{dir}, Env: os.Environ(), KillAt: time.Now().Add(time.Hour)})
	require.ErrorAs(t, err, &se)
	assert.Equal(t, 126, se.Status)
}

func TestWireRoundTrip(t *testing.T) {
	at := time.Now().Add(time.Second)
	for _, ev := range []Event{
		{Kind: Started, Pid: 42},
		{Kind: Failed, Status: 127, Text: `exec: "x": executable file not found in $PATH`},
		{Kind: Stopped},
		{Kind: Exited, Wait: 0x0900},
		{Kind: Killing},
		{Kind: Killed, Count: 3, LastReaped: at},
	} {
		line := ev.line()
		require.True(t, strings.HasSuffix(line, "\n"))
		got, err := parseEvent(strings.TrimSuffix(line, "\n"))
		require.NoError(t, err, line)
		assert.WithinDuration(t, ev.LastReaped, got.LastReaped, time.Millisecond)
		got.LastReaped = ev.LastReaped
		assert.Equal(t, ev, got)
	}
	for _, bad := range []string{"", "started", "started -1", "failed x y", "exited x", "killed 1", "hello"} {
		_, err := parseEvent(bad)
		assert.Error(t, err, "%q", bad)
	}
	for _, c := range []control{{release: true}, {killAt: 123456789}} {
		got, err := parseControl(strings.TrimSuffix(c.line(), "\n"))
		require.NoError(t, err)
		assert.Equal(t, c, got)
	}
	for _, bad := range []string{"", "kill-at", "kill-at -5", "kill-at x", "release now"} {
		_, err := parseControl(bad)
		assert.Error(t, err, "%q", bad)
	}
}

func TestStartedByHandItRefuses(t *testing.T) {
	assert.Equal(t, 2, Main([]string{"--kill-at", "1", "--", "true"}))
}
