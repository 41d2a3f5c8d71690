// Package monoserver builds and runs the real `monolock serve` binary for
// the benchmarks, the same way users run it.
package monoserver

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// BuildAt returns the monolock binary of an older revision:
// $MONOLOCK_BEFORE_BIN if set (commit is then ""), else a build of go/ as
// it was at rev in the git repository at repoRoot, into outDir. commit is
// rev's abbreviated commit id. The tree is taken with `git archive`, so the
// working tree and its uncommitted changes are left alone; the build runs
// with this process's environment (GOFLAGS included), as Build's does.
func BuildAt(repoRoot, rev, outDir string) (bin, commit string, err error) {
	if bin := os.Getenv("MONOLOCK_BEFORE_BIN"); bin != "" {
		return bin, "", nil
	}
	out, err := exec.Command("git", "-C", repoRoot, "rev-parse", "--short", "--verify", rev+"^{commit}").Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return "", "", fmt.Errorf("revision %q: %w: %s", rev, err, bytes.TrimSpace(exit.Stderr))
		}
		return "", "", fmt.Errorf("revision %q: %w", rev, err)
	}
	commit = strings.TrimSpace(string(out))
	src, err := os.MkdirTemp(outDir, "src-"+commit+"-")
	if err != nil {
		return "", "", err
	}
	defer os.RemoveAll(src)
	archive := exec.Command("git", "-C", repoRoot, "archive", "--format=tar", commit, "go")
	untar := exec.Command("tar", "-x", "-C", src)
	archive.Stderr, untar.Stderr = os.Stderr, os.Stderr
	if untar.Stdin, err = archive.StdoutPipe(); err != nil {
		return "", "", err
	}
	if err := untar.Start(); err != nil {
		return "", "", err
	}
	errA := archive.Run()
	if errU := untar.Wait(); errA != nil || errU != nil {
		return "", "", fmt.Errorf("extracting go/ at %s: %w", commit, cmp.Or(errA, errU))
	}
	bin, err = filepath.Abs(filepath.Join(outDir, "monolock-"+commit))
	if err != nil {
		return "", "", err
	}
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/monolock")
	cmd.Dir = filepath.Join(src, "go")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", "", fmt.Errorf("building monolock at %s: %w", commit, err)
	}
	return bin, commit, nil
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
