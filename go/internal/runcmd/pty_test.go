//go:build linux

package runcmd

// monolock run on a terminal, as a person runs it: a pseudo-terminal whose
// session leader is monolock run itself, or a shell.

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/testkit/pty"
)

func startPTY(t *testing.T, dir string, argv ...string) *pty.Session {
	t.Helper()
	return pty.Start(t, dir, wait, argv...)
}

func TestTerminalCommandReadsIt(t *testing.T) {
	srv := startServer(t)
	p := startPTY(t, t.TempDir(), monolockBin, "run", "--server", srv.Addr, "tty", "--", "sh", "-c", `echo ready; read line; echo "got:$line"`)
	p.WaitOutput("ready")
	p.Type("hello\n")
	p.WaitOutput("got:hello")
	require.Equal(t, 0, p.Status(), p.Output())
}

// Ctrl-C goes to the command, which has the terminal.
func TestTerminalCtrlCReachesTheCommand(t *testing.T) {
	srv := startServer(t)
	p := startPTY(t, t.TempDir(), monolockBin, "run", "--server", srv.Addr, "tty", "--", "sh", "-c", `trap 'echo got INT; exit 7' INT; echo ready; read line`)
	p.WaitOutput("ready")
	p.Type("\x03")
	p.WaitOutput("got INT")
	require.Equal(t, 7, p.Status(), p.Output())
}

// After the command, the terminal is given back: the shell that started
// monolock run reads it again.
func TestTerminalGivenBack(t *testing.T) {
	srv := startServer(t)
	script := fmt.Sprintf(`%s run --server %s tty -- sh -c 'read a; echo "got:$a"'; echo "status:$?"; read b; echo "after:$b"`, monolockBin, srv.Addr)
	p := startPTY(t, t.TempDir(), "sh", "-c", script)
	p.Type("one\n")
	p.WaitOutput("status:0")
	p.Type("two\n")
	p.WaitOutput("after:two")
	require.Equal(t, 0, p.Status(), p.Output())
}

// SIGTERM to monolock run stops a command that has the terminal.
func TestTerminalSIGTERM(t *testing.T) {
	srv := startServer(t)
	p := startPTY(t, t.TempDir(), monolockBin, "run", "--server", srv.Addr, "tty", "--", "sh", "-c", `echo ready; read line`)
	p.WaitOutput("ready")
	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 128+int(syscall.SIGTERM), p.Status(), p.Output())
}

// A lost lock stops the command and what it started, terminal or not.
func TestTerminalLostLockStopsEverything(t *testing.T) {
	srv := startServer(t)
	dir := t.TempDir()
	p := startPTY(t, dir, monolockBin, "run", "--server", srv.Addr, "--grace", "300ms", "tty", "--", "sh", "-c",
		`(trap '' TERM; exec sleep 300) & echo $! > child; echo ready; read line`)
	p.WaitOutput("ready")
	child, err := strconv.Atoi(strings.TrimSpace(waitFile(t, filepath.Join(dir, "child"))))
	require.NoError(t, err)
	require.NoError(t, srv.Cmd.Process.Kill())
	require.Equal(t, ExitLockLost, p.Status(), p.Output())
	assert.Contains(t, p.Output(), "monolock run: lock lost")
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
	p.WaitOutput("ready")
	p.Type("\x1a")
	p.WaitOutput(fmt.Sprintf("stopped:%d", 128+int(syscall.SIGSTOP)))
	p.Type("back\n")
	p.WaitOutput("got:back")
	p.WaitOutput("status:0")
	require.Equal(t, 0, p.Status(), p.Output())
}
