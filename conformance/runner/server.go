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
	cmd     *exec.Cmd
	dataDir string
	addr    string
	mu      sync.Mutex
	log     strings.Builder
}

// startServer starts `monolock serve` on a free loopback port with a fresh
// data directory and waits for its "msg=listening addr=..." line.
func startServer(ctx context.Context, bin string) (*server, error) {
	dataDir, err := os.MkdirTemp("", "monolock-conformance-")
	if err != nil {
		return nil, err
	}
	s := &server{dataDir: dataDir}
	s.cmd = exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--data-dir", dataDir)
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	s.cmd.Stdout = nil
	if err := s.cmd.Start(); err != nil {
		_ = os.RemoveAll(dataDir)
		return nil, err
	}
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			if s.log.Len() < 64<<10 {
				s.log.WriteString(line + "\n")
			}
			s.mu.Unlock()
			if !sent && strings.Contains(line, "msg=listening") {
				if a := field(line, "addr"); a != "" {
					addrc <- a
					sent = true
				}
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
		s.addr = a
		return s, nil
	case <-ctx.Done():
		s.stop()
		return nil, fmt.Errorf("server did not report listening:\n%s", s.logs())
	case <-time.After(15 * time.Second):
		s.stop()
		return nil, fmt.Errorf("server did not report listening within 15s:\n%s", s.logs())
	}
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
	_ = os.RemoveAll(s.dataDir)
}
