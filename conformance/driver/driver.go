// Package driver runs one conformance driver process and speaks the pipe
// protocol of docs/writing-a-client.md with it (the schema is
// go/testkit/pipe): JSON commands on its stdin, JSON events on its stdout,
// each event stamped by the runner when read.
package driver

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/monolock/monolock/go/testkit/pipe"
)

// Event is one line the driver printed: typed, and as written.
type Event struct {
	At time.Duration // when the runner read it, since the scenario start
	pipe.Event
	Fields map[string]any // the whole object, numbers as json.Number, for judging
	Line   string
}

func (e Event) String() string { return e.Line }

// Process is a running driver.
type Process struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	start time.Time

	stderr *limitedBuffer

	mu       sync.Mutex
	events   []Event
	taken    map[int]bool // events consumed by expectations
	fault    error        // runtime error: bad line, driver_error, early exit
	exited   bool
	exitErr  error
	changed  chan struct{}
	quitting bool

	// sink, when set, takes every event after ready instead of the history.
	sink func(Event)
	done chan struct{} // closed when the process has exited
}

// Start launches argv in dir with extra environment, and waits for the
// "ready" event (or ctx's end). It returns the ready event too.
// If the start fails after the launch, the (killed) process is returned with
// the error, so that its stderr can be reported.
func Start(ctx context.Context, dir string, argv []string, env []string, start time.Time) (*Process, Event, error) {
	return launch(ctx, dir, argv, env, start, nil)
}

// StartStream is Start for a long run such as a benchmark: every event
// after ready goes to sink, in order, from the one goroutine that reads the
// driver, and none is kept, so that memory does not grow with the run. Next,
// NextIf, Pending and Events see only the ready event.
func StartStream(ctx context.Context, dir string, argv []string, env []string, start time.Time, sink func(Event)) (*Process, Event, error) {
	return launch(ctx, dir, argv, env, start, sink)
}

func launch(ctx context.Context, dir string, argv []string, env []string, start time.Time, sink func(Event)) (*Process, Event, error) {
	if len(argv) == 0 {
		return nil, Event{}, errors.New("empty run command")
	}
	prog := argv[0]
	if strings.ContainsRune(prog, filepath.Separator) && !filepath.IsAbs(prog) {
		prog = filepath.Join(dir, prog) // relative to the driver's directory
	}
	cmd := exec.Command(prog, argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	// A process group of its own, so that killing it also kills whatever a
	// wrapper (npx, a shell, cargo run) started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &Process{cmd: cmd, start: start, stderr: &limitedBuffer{max: 64 << 10},
		taken: map[int]bool{}, changed: make(chan struct{}), sink: sink, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, Event{}, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, Event{}, err
	}
	if err := cmd.Start(); err != nil {
		return nil, Event{}, err
	}
	go p.readLoop(stdout)
	// On failure the killed process is still returned, for its stderr.
	ready, err := p.next(ctx, func(e Event) bool { return true })
	if err != nil {
		p.Kill()
		return p, Event{}, fmt.Errorf("no ready event: %w", err)
	}
	if ready.Name != pipe.Ready {
		p.Kill()
		return p, Event{}, fmt.Errorf("first event is not ready: %s", ready.Line)
	}
	return p, ready, nil
}

func (p *Process) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Process) readLoop(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		at := time.Since(p.start)
		line := sc.Text()
		if len(bytes.TrimSpace([]byte(line))) == 0 {
			continue
		}
		typed, fields, err := pipe.ParseEvent([]byte(line))
		var streamed *Event
		p.mu.Lock()
		switch {
		case p.quitting:
			// Events after quit are not judged.
		case err != nil:
			p.setFault(fmt.Errorf("driver printed a line that is not a JSON object: %q", line))
		default:
			ev := Event{At: at, Event: typed, Fields: fields, Line: line}
			if p.sink != nil && len(p.events) > 0 {
				streamed = &ev
			} else {
				p.events = append(p.events, ev)
			}
			if ev.Name == pipe.DriverError {
				p.setFault(fmt.Errorf("driver_error: %s", line))
			}
		}
		p.notify()
		p.mu.Unlock()
		if streamed != nil {
			p.sink(*streamed) // unlocked: the sink may call Send
		}
	}
	err := p.cmd.Wait()
	p.mu.Lock()
	p.exited, p.exitErr = true, err
	close(p.done)
	if !p.quitting {
		p.setFault(fmt.Errorf("driver exited before quit (%v)", err))
	}
	p.notify()
	p.mu.Unlock()
}

// Exited is closed once the driver process has exited.
func (p *Process) Exited() <-chan struct{} { return p.done }

func (p *Process) setFault(err error) {
	if p.fault == nil {
		p.fault = err
	}
}

// Fault returns the first runtime error seen, if any.
func (p *Process) Fault() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fault
}

// Send writes one command.
func (p *Process) Send(cmd pipe.Command) error {
	b, err := cmd.MarshalLine()
	if err != nil {
		return err
	}
	if _, err = p.stdin.Write(b); err != nil {
		// Most likely the driver is gone: report why, not the broken pipe.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		p.waitExit(ctx)
		if f := p.Fault(); f != nil {
			return f
		}
	}
	return err
}

// waitExit waits until the process has exited or ctx ends.
func (p *Process) waitExit(ctx context.Context) {
	for {
		p.mu.Lock()
		exited, ch := p.exited, p.changed
		p.mu.Unlock()
		if exited {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

// ErrFault wraps a runtime error of the driver seen while waiting.
var ErrFault = errors.New("driver fault")

// next returns the first unconsumed event matching keep and consumes it.
func (p *Process) next(ctx context.Context, keep func(Event) bool) (Event, error) {
	for {
		p.mu.Lock()
		for i, e := range p.events {
			if !p.taken[i] && keep(e) {
				p.taken[i] = true
				p.mu.Unlock()
				return e, nil
			}
		}
		if p.fault != nil {
			err := p.fault
			p.mu.Unlock()
			return Event{}, fmt.Errorf("%w: %v", ErrFault, err)
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// Next consumes the next event for id, waiting until ctx ends.
func (p *Process) Next(ctx context.Context, id string) (Event, error) {
	return p.next(ctx, func(e Event) bool { return e.ID == id })
}

// NextIf waits for the next event for id and consumes it only if take
// accepts it; an event left in place is still the next one.
func (p *Process) NextIf(ctx context.Context, id string, take func(Event) bool) (Event, bool, error) {
	for {
		p.mu.Lock()
		for i, e := range p.events {
			if !p.taken[i] && e.ID == id {
				ok := take(e)
				p.taken[i] = ok
				p.mu.Unlock()
				return e, ok, nil
			}
		}
		if p.fault != nil {
			err := p.fault
			p.mu.Unlock()
			return Event{}, false, fmt.Errorf("%w: %v", ErrFault, err)
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return Event{}, false, ctx.Err()
		}
	}
}

// Pending returns the unconsumed events (for id, or all when id is "").
func (p *Process) Pending(id string) []Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Event
	for i, e := range p.events {
		if !p.taken[i] && (id == "" || e.ID == id) {
			out = append(out, e)
		}
	}
	return out
}

// Events returns every event read so far.
func (p *Process) Events() []Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Event(nil), p.events...)
}

// Stderr returns the tail of what the driver logged.
func (p *Process) Stderr() string { return p.stderr.String() }

// Quit sends quit, closes stdin and waits up to grace for the exit. The
// process group is killed in every case; the error says if it had to be.
func (p *Process) Quit(grace time.Duration) error {
	p.mu.Lock()
	p.quitting = true
	p.mu.Unlock()
	_ = p.Send(pipe.Command{Cmd: pipe.Quit})
	_ = p.stdin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	p.waitExit(ctx)
	p.mu.Lock()
	exited, exitErr := p.exited, p.exitErr
	p.mu.Unlock()
	p.Kill() // and whatever children the driver left behind
	if !exited {
		return fmt.Errorf("%w: driver did not exit within %v of quit", ErrHung, grace)
	}
	if exitErr != nil {
		return fmt.Errorf("driver exited with %v after quit, want status 0", exitErr)
	}
	return nil
}

// ErrHung marks a driver that did not exit after quit.
var ErrHung = errors.New("hung")

// Signal sends sig to the driver's process group: SIGSTOP and SIGCONT
// pause and resume a driver together with any child its run command
// started (a wrapper script's JVM, say).
func (p *Process) Signal(sig syscall.Signal) error {
	if p.cmd.Process == nil {
		return errors.New("driver not started")
	}
	return syscall.Kill(-p.cmd.Process.Pid, sig)
}

// Kill kills the driver's process group.
func (p *Process) Kill() {
	if p.cmd.Process != nil {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// limitedBuffer keeps the last max bytes written.
type limitedBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > b.max {
		b.buf = b.buf[len(b.buf)-b.max:]
	}
	return len(p), nil
}

func (b *limitedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
