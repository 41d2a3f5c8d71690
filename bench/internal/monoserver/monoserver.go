// Package monoserver builds and runs the real `monolock serve` binary for
// the benchmarks, the same way users run it.
package monoserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/monolock/monolock/go/testkit/launch"
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
	AdminAddr string // the admin API's, when it runs (--admin)
	proc      *launch.Server
}

// PID is the server's process id.
func (s *Server) PID() int { return s.proc.PID() }

// Start runs `bin serve` on 127.0.0.1 with a port chosen by the kernel and
// a data directory under dataDir, and waits (up to 20 s) for its ready
// file: its lock port and its admin API, if any, listen.
func Start(ctx context.Context, bin, dataDir string, extraArgs ...string) (*Server, error) {
	args := append([]string{"--listen", "127.0.0.1:0", "--data-dir", dataDir}, extraArgs...)
	p, err := launch.Start(ctx, launch.Command(bin, args...), launch.Options{Wait: 20 * time.Second, StopGrace: 15 * time.Second})
	if err != nil {
		return nil, err
	}
	return &Server{Addr: p.LockAddr, AdminAddr: p.AdminAddr, proc: p}, nil
}

// Signal sends sig to the server.
func (s *Server) Signal(sig os.Signal) error { return s.proc.Signal(sig) }

// Kill ends the server at once (SIGKILL), as a crash would, and waits for
// it to be gone.
func (s *Server) Kill() { s.proc.Kill() }

// Stop ends the server gracefully (SIGTERM), killing it after 15 s.
func (s *Server) Stop() { _ = s.proc.Stop() }

// Certs are the PEM files of a TLS set-up on loopback: a private CA and a
// server certificate for 127.0.0.1 that it signs.
type Certs struct {
	CA, Cert, Key string
}

// ServeArgs are the flags that make `monolock serve` speak TLS with c.
func (c Certs) ServeArgs() []string { return []string{"--tls-cert", c.Cert, "--tls-key", c.Key} }

// MakeCerts writes a CA and a server certificate for 127.0.0.1 into dir
// with `bin certs`, as a user would make them.
func MakeCerts(bin, dir string) (Certs, error) {
	for _, args := range [][]string{
		{"certs", "init", dir},
		{"certs", "server", "--dir", dir, "--host", "127.0.0.1"},
	} {
		if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
			return Certs{}, fmt.Errorf("%s %v: %w: %s", bin, args, err, out)
		}
	}
	return Certs{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "server.crt"), Key: filepath.Join(dir, "server.key")}, nil
}
