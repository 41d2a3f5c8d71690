// Package testbin gives integration tests the real monolock binary and runs
// `monolock serve` from it, so that every test finds the binary and learns
// the server's addresses the same way (launch.Start: its ready file).
package testbin

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/monolock/monolock/go/testkit/launch"
)

// Build compiles the monolock command of this source tree into dir and
// returns the path of the binary. Tests of the command itself use it so that
// they never run a stale $MONOLOCK_BIN.
func Build(dir string) (string, error) {
	bin := filepath.Join(dir, "monolock")
	// The import path, not a relative one: it works from any package's
	// directory in the module.
	out, err := exec.Command("go", "build", "-o", bin, "github.com/monolock/monolock/go/cmd/monolock").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building monolock: %v\n%s", err, out)
	}
	return bin, nil
}

// Path returns $MONOLOCK_BIN when it is set, else Build(dir).
func Path(dir string) (string, error) {
	if bin := os.Getenv("MONOLOCK_BIN"); bin != "" {
		return bin, nil
	}
	return Build(dir)
}

// Binary is Path for one test, building into its temporary directory.
func Binary(t testing.TB) string {
	t.Helper()
	bin, err := Path(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// Run runs the tests of m with *bin set by find (Build or Path) in a
// temporary directory removed afterwards. It returns the exit code for
// TestMain: m.Run's, or 1 when there is no binary.
func Run(m *testing.M, find func(dir string) (string, error), bin *string) int {
	dir, err := os.MkdirTemp("", "monolock-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if *bin, err = find(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// Server is a running `monolock serve` whose stderr is kept line by line.
type Server struct {
	*launch.Server        // Cmd, AdminAddr and the rest of its ready file, Signal, Stop
	Addr           string // the lock protocol address (LockAddr)

	t      testing.TB
	mu     sync.Mutex
	lines  []string
	part   []byte        // a line not yet ended
	more   chan struct{} // closed and replaced when a line arrives
	exited chan struct{} // closed once the process is reaped and every line is in
}

// Start starts cmd, a `monolock serve` the caller has set up (arguments,
// environment), and returns once it is ready (launch.Start: its ready file
// is written); wait bounds that and every WaitLog. The process is killed
// when the test ends, and its log is shown if the test failed.
func Start(t testing.TB, wait time.Duration, cmd *exec.Cmd) *Server {
	t.Helper()
	s := &Server{t: t, more: make(chan struct{}), exited: make(chan struct{})}
	cmd.Stderr = (*lineWriter)(s)
	ls, err := launch.Start(context.Background(), cmd, launch.Options{Wait: wait})
	if err != nil {
		t.Fatal(err)
	}
	s.Server, s.Addr = ls, ls.LockAddr
	go func() {
		<-ls.Exited()
		s.mu.Lock()
		if len(s.part) > 0 {
			s.addLine(string(s.part))
		}
		s.mu.Unlock()
		close(s.exited)
	}()
	t.Cleanup(func() {
		ls.Kill()
		<-s.exited
		if t.Failed() {
			t.Logf("server log:\n%s", s.LogText())
		}
	})
	return s
}

// lineWriter is a Server's stderr: it cuts what the process writes into
// lines.
type lineWriter Server

func (w *lineWriter) Write(p []byte) (int, error) {
	s := (*Server)(w)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.part = append(s.part, p...)
	for {
		i := bytes.IndexByte(s.part, '\n')
		if i < 0 {
			return len(p), nil
		}
		s.addLine(string(s.part[:i]))
		s.part = s.part[i+1:]
	}
}

// addLine records a line; s.mu is held.
func (s *Server) addLine(l string) {
	s.lines = append(s.lines, l)
	close(s.more)
	s.more = make(chan struct{})
}

// Log returns the stderr lines so far.
func (s *Server) Log() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.lines...)
}

// LogText returns the stderr so far, each line ended by a newline.
func (s *Server) LogText() string {
	var b strings.Builder
	for _, l := range s.Log() {
		b.WriteString(l + "\n")
	}
	return b.String()
}

// Exited is closed once the process has exited and been reaped, and all
// of its log is in.
func (s *Server) Exited() <-chan struct{} { return s.exited }

// WaitExit waits up to d for the process to exit and returns its status.
func (s *Server) WaitExit(d time.Duration) int {
	s.t.Helper()
	select {
	case <-s.exited:
	case <-time.After(d):
		s.t.Fatalf("monolock serve did not exit: %s", s.LogText())
	}
	return s.ExitCode()
}

// WaitLog returns the first log line, from index from on, that contains any
// of subs, waiting up to d for it; the test fails if the process exits or d
// passes first.
func (s *Server) WaitLog(from int, d time.Duration, subs ...string) string {
	s.t.Helper()
	quoted := make([]string, len(subs))
	for i, sub := range subs {
		quoted[i] = regexp.QuoteMeta(sub)
	}
	return s.WaitLogLine(from, d, regexp.MustCompile(strings.Join(quoted, "|")))
}

// WaitLogLine is WaitLog for a line matching re.
func (s *Server) WaitLogLine(from int, d time.Duration, re *regexp.Regexp) string {
	s.t.Helper()
	deadline := time.After(d)
	for i := from; ; {
		s.mu.Lock()
		lines, more := s.lines, s.more
		s.mu.Unlock()
		for ; i < len(lines); i++ {
			if re.MatchString(lines[i]) {
				return lines[i]
			}
		}
		select {
		case <-more:
		case <-s.exited:
			// Lines may have arrived between the scan and the exit.
			if s.hasLine(i, re) {
				continue
			}
			s.t.Fatalf("monolock serve exited (status %d) before logging %q: %s", s.ExitCode(), re, s.LogText())
		case <-deadline:
			s.t.Fatalf("monolock serve did not log %q: %s", re, s.LogText())
		}
	}
}

func (s *Server) hasLine(from int, re *regexp.Regexp) bool {
	for _, l := range s.Log()[from:] {
		if re.MatchString(l) {
			return true
		}
	}
	return false
}
