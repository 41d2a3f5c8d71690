// Package monoserver builds and runs the real `monolock serve` binary for
// the benchmarks, the same way users run it.
package monoserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Build returns the monolock binary: $MONOLOCK_BIN if set, else a fresh
// build of goDir/cmd/monolock into outDir.
func Build(goDir, outDir string) (string, error) {
	if bin := os.Getenv("MONOLOCK_BIN"); bin != "" {
		return bin, nil
	}
	bin := filepath.Join(outDir, "monolock")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/monolock")
	cmd.Dir = goDir
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building monolock: %w", err)
	}
	return bin, nil
}

// Server is one running `monolock serve`.
type Server struct {
	Addr      string
	AdminAddr string // the admin API's, when started with --admin
	cmd       *exec.Cmd
	done      chan struct{}
}

// PID is the server's process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Start runs `bin serve` on 127.0.0.1 with a port chosen by the kernel and
// a data directory under dataDir, and waits for its "listening" log line
// (and, when extraArgs include --admin, for its "admin listening" line).
func Start(ctx context.Context, bin, dataDir string, extraArgs ...string) (*Server, error) {
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--data-dir", dataDir}, extraArgs...)
	wantAdmin := slices.Contains(extraArgs, "--admin")
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &Server{cmd: cmd, done: make(chan struct{})}
	addrc := make(chan [2]string, 1)
	go func() {
		var addrs [2]string // lock port, admin API
		sent := false
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			j := strings.Index(line, "addr=")
			if j < 0 {
				continue
			}
			addr := strings.Fields(line[j+len("addr="):])[0]
			switch {
			case strings.Contains(line, "msg=listening"):
				addrs[0] = addr
			case strings.Contains(line, `msg="admin listening"`):
				addrs[1] = addr
			}
			if !sent && addrs[0] != "" && (addrs[1] != "" || !wantAdmin) {
				addrc <- addrs
				sent = true
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	go func() { _ = cmd.Wait(); close(s.done) }()
	select {
	case a := <-addrc:
		s.Addr, s.AdminAddr = a[0], a[1]
		return s, nil
	case <-s.done:
		return nil, errors.New("monolock serve exited before listening")
	case <-time.After(20 * time.Second):
		s.Stop()
		return nil, errors.New("monolock serve did not log its address within 20 s")
	case <-ctx.Done():
		s.Stop()
		return nil, ctx.Err()
	}
}

// Signal sends sig to the server.
func (s *Server) Signal(sig os.Signal) error { return s.cmd.Process.Signal(sig) }

// Kill ends the server at once (SIGKILL), as a crash would, and waits for
// it to be gone.
func (s *Server) Kill() {
	_ = s.cmd.Process.Kill()
	<-s.done
}

// Stop ends the server gracefully (SIGTERM), killing it after 15 s.
func (s *Server) Stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}
