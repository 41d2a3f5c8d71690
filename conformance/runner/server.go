package runner

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/monolock/monolock/conformance/scenario"
	"github.com/monolock/monolock/conformance/tlscerts"
	"github.com/monolock/monolock/go/testkit/launch"
)

// BuildServer returns the server binary: $MONOLOCK_BIN if set, else it
// builds go/cmd/monolock into bin/monolock under root.
func BuildServer(ctx context.Context, root string) (string, error) {
	if bin := os.Getenv("MONOLOCK_BIN"); bin != "" {
		return bin, nil
	}
	out := filepath.Join(root, "bin", "monolock")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/monolock")
	cmd.Dir = filepath.Join(root, "go")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the server: %v\n%s", err, b)
	}
	return out, nil
}

// server is one running real server.
type server struct {
	proc      *launch.Server
	dataDir   string
	addr      string
	adminAddr string
	filesDir  string          // certificates and ACL, or ""
	certs     *tlscerts.Files // nil without TLS
}

// startServer starts `monolock serve` on a free loopback port, with its
// admin API on another, a fresh data directory and, as the scenario's
// server object asks, a fresh PKI for TLS and mutual TLS and an ACL file.
// It waits (up to 15 s) for the server's ready file.
func startServer(ctx context.Context, bin string, cfg *scenario.Server) (*server, error) {
	dataDir, err := os.MkdirTemp("", "monolock-conformance-")
	if err != nil {
		return nil, err
	}
	s := &server{dataDir: dataDir}
	args, err := s.configure(cfg)
	if err != nil {
		s.removeFiles()
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if s.proc, err = launch.Start(ctx, cmd, launch.Options{Wait: 15 * time.Second}); err != nil {
		s.removeFiles()
		return nil, err
	}
	s.addr, s.adminAddr = s.proc.LockAddr, s.proc.AdminAddr
	return s, nil
}

// configure writes the files the server needs into its data directory's
// sibling and returns the arguments of monolock serve.
func (s *server) configure(cfg *scenario.Server) ([]string, error) {
	args := []string{"serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--data-dir", s.dataDir}
	if cfg == nil {
		return args, nil
	}
	if cfg.MaxLeaseMS > 0 {
		args = append(args, "--max-lease", fmt.Sprintf("%dms", cfg.MaxLeaseMS))
	}
	// Certificates and the ACL go into a directory of their own, removed
	// with the data directory.
	dir, err := os.MkdirTemp("", "monolock-conformance-files-")
	if err != nil {
		return nil, err
	}
	s.filesDir = dir
	if cfg.TLS {
		certs, err := tlscerts.Generate(dir)
		if err != nil {
			return nil, fmt.Errorf("making test certificates: %w", err)
		}
		s.certs = certs
		args = append(args, "--tls-cert", certs.ServerCert, "--tls-key", certs.ServerKey)
		if cfg.ClientCA {
			args = append(args, "--tls-client-ca", certs.CA)
		}
	}
	if cfg.ACL != nil {
		path := filepath.Join(dir, "acl")
		body := strings.Join(cfg.ACL, "\n") + "\n"
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			return nil, err
		}
		args = append(args, "--acl", path)
	}
	return args, nil
}

// stop terminates the server, then its data directory.
func (s *server) stop() {
	if s.proc != nil {
		_ = syscall.Kill(-s.proc.PID(), syscall.SIGKILL)
		<-s.proc.Exited()
	}
	s.removeFiles()
}

func (s *server) removeFiles() {
	_ = os.RemoveAll(s.dataDir)
	if s.filesDir != "" {
		_ = os.RemoveAll(s.filesDir)
	}
}
