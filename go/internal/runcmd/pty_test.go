//go:build linux

package runcmd

// monolock run on a terminal, as a person runs it: a pseudo-terminal whose
// session leader is monolock run itself, or a shell.

import (
	"fmt"
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
	"golang.org/x/sys/unix"
)

// ptySession is a process running as the session leader of a new
// pseudo-terminal, stdin, stdout and stderr on it.
type ptySession struct {
	t      *testing.T
	master *os.File
	cmd    *exec.Cmd
	mu     sync.Mutex
	out    strings.Builder
	more   chan struct{} // closed and replaced when output arrives
	exited chan struct{}
}

func startPTY(t *testing.T, dir string, argv ...string) *ptySession {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err)
	var n int
	raw, err := master.SyscallConn()
	require.NoError(t, err)
	require.NoError(t, raw.Control(func(fd uintptr) {
		if err = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); err == nil {
			n, err = unix.IoctlGetInt(int(fd), unix.TIOCGPTN)
		}
	}))
	require.NoError(t, err)
	slave, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err)
	defer slave.Close() // the session has its own copies

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	require.NoError(t, cmd.Start())
	p := &ptySession{t: t, master: master, cmd: cmd, more: make(chan struct{}), exited: make(chan struct{})}
	go p.read()
	go func() { _ = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		// The session's processes get SIGHUP when the terminal goes.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		master.Close()
		<-p.exited
		if t.Failed() {
			t.Logf("terminal output:\n%s", p.output())
		}
	})
	return p
}

func (p *ptySession) read() {
	buf := make([]byte, 4096)
	for {
		n, err := p.master.Read(buf)
		p.mu.Lock()
		p.out.Write(buf[:n])
		close(p.more)
		p.more = make(chan struct{})
		p.mu.Unlock()
		if err != nil {
			return
		}
	}
}

func (p *ptySession) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// waitOutput waits until the terminal has shown want.
func (p *ptySession) waitOutput(want string) {
	p.t.Helper()
	deadline := time.After(wait)
	for {
		p.mu.Lock()
		got, more := p.out.String(), p.more
		p.mu.Unlock()
		if strings.Contains(got, want) {
			return
		}
		select {
		case <-more:
		case <-deadline:
			p.t.Fatalf("the terminal did not show %q", want)
		}
	}
}

// typeIn sends keys as a person types them.
func (p *ptySession) typeIn(keys string) {
	p.t.Helper()
	_, err := p.master.Write([]byte(keys))
	require.NoError(p.t, err)
}

func (p *ptySession) status() int {
	p.t.Helper()
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(wait):
		p.t.Fatal("the session did not end (a process stopped on the terminal?)")
		return -1
	}
}

// The command reads the terminal; before the fix it was stopped by SIGTTIN
// and monolock run waited for it forever.
func TestTerminalCommandReadsIt(t *testing.T) {
	srv := startServer(t)
	p := startPTY(t, t.TempDir(), monolockBin, "run", "--server", srv.Addr, "tty", "--", "sh", "-c", `echo ready; read line; echo "got:$line"`)
	p.waitOutput("ready")
	p.typeIn("hello\n")
	p.waitOutput("got:hello")
	require.Equal(t, 0, p.status(), p.output())
}

// Ctrl-C goes to the command, which has the terminal.
func TestTerminalCtrlCReachesTheCommand(t *testing.T) {
	srv := startServer(t)
	p := startPTY(t, t.TempDir(), monolockBin, "run", "--server", srv.Addr, "tty", "--", "sh", "-c", `trap 'echo got INT; exit 7' INT; echo ready; read line`)
	p.waitOutput("ready")
	p.typeIn("\x03")
	p.waitOutput("got INT")
	require.Equal(t, 7, p.status(), p.output())
}

// After the command, the terminal is given back: the shell that started
// monolock run reads it again.
func TestTerminalGivenBack(t *testing.T) {
	srv := startServer(t)
	script := fmt.Sprintf(`%s run --server %s tty -- sh -c 'read a; echo "got:$a"'; echo "status:$?"; read b; echo "after:$b"`, monolockBin, srv.Addr)
	p := startPTY(t, t.TempDir(), "sh", "-c", script)
	p.typeIn("one\n")
	p.waitOutput("status:0")
	p.typeIn("two\n")
	p.waitOutput("after:two")
	require.Equal(t, 0, p.status(), p.output())
}

// SIGTERM to monolock run stops a command that has the terminal.
func TestTerminalSIGTERM(t *testing.T) {
	srv := startServer(t)
	p := startPTY(t, t.TempDir(), monolockBin, "run", "--server", srv.Addr, "tty", "--", "sh", "-c", `echo ready; read line`)
	p.waitOutput("ready")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 128+int(syscall.SIGTERM), p.status(), p.output())
}

// A lost lock stops the command and what it started, terminal or not.
func TestTerminalLostLockStopsEverything(t *testing.T) {
	srv := startServer(t)
	dir := t.TempDir()
	p := startPTY(t, dir, monolockBin, "run", "--server", srv.Addr, "--grace", "300ms", "tty", "--", "sh", "-c",
		`(trap '' TERM; exec sleep 300) & echo $! > child; echo ready; read line`)
	p.waitOutput("ready")
	child, err := strconv.Atoi(strings.TrimSpace(waitFile(t, filepath.Join(dir, "child"))))
	require.NoError(t, err)
	require.NoError(t, srv.Cmd.Process.Kill())
	require.Equal(t, ExitLockLost, p.status(), p.output())
	assert.Contains(t, p.output(), "monolock run: lock lost")
	require.Eventually(t, func() bool { return !alive(child) }, wait, 10*time.Millisecond, "the background child survived")
}

// Ctrl-Z stops the command and monolock run, as one job of a shell with
// job control; fg continues both, with the terminal.
func TestTerminalCtrlZAndFg(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("needs bash for job control")
	}
	srv := startServer(t)
	script := fmt.Sprintf(`set -m; %s run --server %s tty -- sh -c 'echo ready; read a; echo "got:$a"'; echo "stopped:$?"; fg; echo "status:$?"`, monolockBin, srv.Addr)
	p := startPTY(t, t.TempDir(), bash, "--norc", "--noprofile", "-c", script)
	p.waitOutput("ready")
	p.typeIn("\x1a")
	p.waitOutput(fmt.Sprintf("stopped:%d", 128+int(syscall.SIGSTOP)))
	p.typeIn("back\n")
	p.waitOutput("got:back")
	p.waitOutput("status:0")
	require.Equal(t, 0, p.status(), p.output())
}
