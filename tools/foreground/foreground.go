// Package foreground runs a long-lived command of a mage target (the
// server, an HA cell) in the foreground: it stops the command gracefully
// when the target is interrupted or when the processes that started it are
// gone, which mage and `go run` do not pass on.
package foreground

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Run runs cmd with this process's stdin, stdout and stderr until
// it exits, or until Ctrl-C, SIGTERM or SIGHUP reaches this process or the
// processes that started it are gone (startersGone); then it sends cmd
// SIGTERM, its graceful stop, and kills it if it has not exited within
// grace.
func Run(ctx context.Context, cmd *exec.Cmd, name string, grace time.Duration) error {
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	stops := make(chan os.Signal, 1)
	// Caught before the start, so that no signal kills this process alone
	// and leaves the child behind.
	signal.Notify(stops, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(stops)
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		return err
	case <-ctx.Done(): // mage cancels on SIGINT
	case <-stops:
	case <-startersGone():
	}
	// Windows has no signals.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		_ = cmd.Process.Kill()
	}
	select {
	case err := <-exited:
		return err
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		return fmt.Errorf("%s did not stop within %v of SIGTERM; killed", name, grace)
	}
}

// startersGone returns a channel closed when the processes that started
// this one are gone: mage, which runs the compiled magefile, and the go
// command above it under `go run mage.go`. Neither passes a SIGTERM on to
// its child, so this one watches them. Unix only: elsewhere it never closes.
func startersGone() <-chan struct{} {
	gone := make(chan struct{})
	parent := os.Getppid()
	grandparent, ok := parentOf(parent)
	if runtime.GOOS == "windows" || !ok {
		return gone
	}
	watchGrandparent := commandName(grandparent) == "go"
	go func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for range tick.C {
			// A process whose parent dies is given a new parent.
			if os.Getppid() != parent {
				break
			}
			if g, ok := parentOf(parent); watchGrandparent && (!ok || g != grandparent) {
				break
			}
		}
		close(gone)
	}()
	return gone
}

// parentOf returns the parent process id of pid: from /proc on Linux, from
// ps elsewhere.
func parentOf(pid int) (int, bool) {
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) > 1 {
			ppid, err := strconv.Atoi(fields[1])
			return ppid, err == nil
		}
		return 0, false
	}
	out, err := exec.Command("ps", "-o", "ppid=", "-p", strconv.Itoa(pid)).Output()
	if err != nil {
		return 0, false
	}
	ppid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	return ppid, err == nil
}

// commandName returns the name of pid's program, without its directory.
func commandName(pid int) string {
	if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil {
		return strings.TrimSpace(string(comm))
	}
	out, _ := exec.Command("ps", "-o", "comm=", "-p", strconv.Itoa(pid)).Output()
	return filepath.Base(strings.TrimSpace(string(out)))
}
