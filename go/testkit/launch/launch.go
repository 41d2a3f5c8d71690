// Package launch starts `monolock serve` for tests, the conformance runner
// and the benchmarks, and learns its addresses from the server's
// --ready-file (docs/operating.md, "The ready file"), never from its log.
//
// It lives in the module github.com/monolock/monolock/go because the
// conformance and bench modules already require that module (through
// replace directives) and the go module's own tests need it too; a package
// under go/internal/ cannot be imported from another module, and go/pkg/ is
// the product's public API. testkit/ holds test support only: it has no
// compatibility promise and imports nothing but the standard library (and
// the ready file's schema, internal/readyfile, which imports nothing), so
// it adds no dependency to a user of the module.
package launch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/monolock/monolock/go/internal/readyfile"
)

// Ready is the object `monolock serve --ready-file` writes once it listens.
type Ready = readyfile.Info

// Defaults of Options.
const (
	DefaultWait      = 20 * time.Second
	DefaultStopGrace = 15 * time.Second
)

// pollInterval is how often the ready file is looked for: a start takes
// tens of milliseconds, and a stat is cheap.
const pollInterval = 10 * time.Millisecond

// tailSize bounds the stderr kept for error messages.
const tailSize = 16 << 10

// Options tune Start; the zero value is the defaults.
type Options struct {
	Wait      time.Duration // how long Start waits for the ready file (DefaultWait)
	StopGrace time.Duration // how long Stop waits after SIGTERM before SIGKILL (DefaultStopGrace)
}

// Server is a running `monolock serve`.
type Server struct {
	Ready
	Cmd *exec.Cmd // to signal it; Start reaps it, so wait on Exited, not Cmd.Wait

	grace  time.Duration
	dir    string // holds the ready file
	tail   *tailBuffer
	exited chan struct{}
}

// Command is exec.Command(bin, "serve", args...): the usual command line
// to give Start.
func Command(bin string, args ...string) *exec.Cmd {
	return exec.Command(bin, append([]string{"serve"}, args...)...)
}

// Start starts cmd, a `monolock serve` command line the caller has set up
// (arguments, environment, process attributes; a wrapper such as `ip
// netns exec` or `sh -c 'exec ...'` is fine as long as it passes on the
// trailing arguments). Start appends --ready-file with a path in a fresh
// temporary directory, and returns once the server has written it. The
// server's stderr goes to cmd.Stderr too when that is set; its tail is
// kept for errors. If the server exits first, or the file is not there
// within o.Wait, or ctx ends, Start kills the server and returns an error
// with the tail of its stderr.
func Start(ctx context.Context, cmd *exec.Cmd, o Options) (*Server, error) {
	if o.Wait <= 0 {
		o.Wait = DefaultWait
	}
	if o.StopGrace <= 0 {
		o.StopGrace = DefaultStopGrace
	}
	dir, err := os.MkdirTemp("", "monolock-ready-")
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "ready.json")
	cmd.Args = append(cmd.Args, "--ready-file", path)
	s := &Server{Cmd: cmd, grace: o.StopGrace, dir: dir, tail: &tailBuffer{}, exited: make(chan struct{})}
	if cmd.Stderr != nil {
		cmd.Stderr = io.MultiWriter(s.tail, cmd.Stderr)
	} else {
		cmd.Stderr = s.tail
	}
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = time.Second // a left-over child holding stderr must not hang the reaper
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	go func() {
		_ = cmd.Wait()
		os.RemoveAll(dir)
		close(s.exited)
	}()
	s.Ready, err = WaitFile(ctx, path, o.Wait, s.exited)
	if err != nil {
		s.Kill()
		return nil, fmt.Errorf("%w; stderr:\n%s", err, s.StderrTail())
	}
	return s, nil
}

// WaitFile waits up to d for the ready file at path and returns what it
// holds. It gives up early when exited (may be nil) is closed without the
// file, or when ctx ends.
func WaitFile(ctx context.Context, path string, d time.Duration, exited <-chan struct{}) (Ready, error) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		r, err := ReadFile(path)
		if err == nil {
			return r, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return Ready{}, err // the server writes it whole, so this is a real error
		}
		select {
		case <-tick.C:
		case <-exited:
			if r, err := ReadFile(path); err == nil {
				return r, nil
			}
			return Ready{}, errors.New("monolock serve exited before it was ready")
		case <-deadline.C:
			return Ready{}, fmt.Errorf("monolock serve was not ready within %v (no %s)", d, path)
		case <-ctx.Done():
			return Ready{}, fmt.Errorf("monolock serve was not ready: %w", ctx.Err())
		}
	}
}

// ReadFile reads and checks a ready file.
func ReadFile(path string) (Ready, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Ready{}, err
	}
	var r Ready
	if err := json.Unmarshal(b, &r); err != nil {
		return Ready{}, fmt.Errorf("ready file %s: %w", path, err)
	}
	if r.LockAddr == "" {
		return Ready{}, fmt.Errorf("ready file %s: no lock_addr in %s", path, b)
	}
	return r, nil
}

// PID is the server's process id.
func (s *Server) PID() int { return s.Cmd.Process.Pid }

// Exited is closed once the process has exited and been reaped.
func (s *Server) Exited() <-chan struct{} { return s.exited }

// ExitCode is the process's exit status once Exited is closed; -1 if a
// signal ended it.
func (s *Server) ExitCode() int { return s.Cmd.ProcessState.ExitCode() }

// Signal sends sig to the server.
func (s *Server) Signal(sig os.Signal) error { return s.Cmd.Process.Signal(sig) }

// Kill ends the server at once (SIGKILL), as a crash would, and waits for
// it to be reaped.
func (s *Server) Kill() {
	_ = s.Cmd.Process.Kill()
	<-s.exited
}

// Stop ends the server gracefully (SIGTERM) and waits for it; after the
// stop grace it kills it. It returns an error when the kill was needed.
func (s *Server) Stop() error {
	_ = s.Cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(s.grace)
	defer t.Stop()
	select {
	case <-s.exited:
		return nil
	case <-t.C:
		s.Kill()
		return fmt.Errorf("monolock serve did not stop within %v of SIGTERM; killed", s.grace)
	}
}

// StderrTail is the last part of the server's stderr so far.
func (s *Server) StderrTail() string { return s.tail.String() }

// tailBuffer keeps the last tailSize bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - tailSize; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
