package runner

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/monolock/monolock/conformance/scenario"
	"github.com/monolock/monolock/conformance/tlscerts"
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
	cmd       *exec.Cmd
	dataDir   string
	addr      string
	adminAddr string
	filesDir  string          // certificates and ACL, or ""
	certs     *tlscerts.Files // nil without TLS
	mu        sync.Mutex
	log       strings.Builder
}

// startServer starts `monolock serve` on a free loopback port, with its
// admin API on another, a fresh data directory and, as the scenario's
// server object asks, a fresh PKI for TLS and mutual TLS and an ACL file.
// It waits for the "msg=listening addr=..." and "msg=\"admin listening\"
// addr=..." lines.
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
	s.cmd = exec.Command(bin, args...)
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		s.removeFiles()
		return nil, err
	}
	s.cmd.Stdout = nil
	if err := s.cmd.Start(); err != nil {
		s.removeFiles()
		return nil, err
	}
	addrc := make(chan [2]string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		var addr, admin string
		sent := false
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			if s.log.Len() < 64<<10 {
				s.log.WriteString(line + "\n")
			}
			s.mu.Unlock()
			switch {
			case strings.Contains(line, "msg=listening"):
				addr = field(line, "addr")
			case strings.Contains(line, `msg="admin listening"`):
				admin = field(line, "addr")
			}
			if !sent && addr != "" && admin != "" {
				addrc <- [2]string{addr, admin}
				sent = true
			}
		}
		close(addrc)
	}()
	select {
	case a, ok := <-addrc:
		if !ok {
			s.stop()
			return nil, fmt.Errorf("server exited without listening:\n%s", s.logs())
		}
		s.addr, s.adminAddr = a[0], a[1]
		return s, nil
	case <-ctx.Done():
		s.stop()
		return nil, fmt.Errorf("server did not report listening:\n%s", s.logs())
	case <-time.After(15 * time.Second):
		s.stop()
		return nil, fmt.Errorf("server did not report listening within 15s:\n%s", s.logs())
	}
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

// field returns the value of key=value in a slog text line.
func field(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

func (s *server) logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

// stop terminates the server, then its data directory.
func (s *server) stop() {
	if s.cmd.Process != nil {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		_ = s.cmd.Wait()
	}
	s.removeFiles()
}

func (s *server) removeFiles() {
	_ = os.RemoveAll(s.dataDir)
	if s.filesDir != "" {
		_ = os.RemoveAll(s.filesDir)
	}
}
