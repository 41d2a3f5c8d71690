package floor

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// Main is `bench floor`: it serves the floor on -listen, prints
// "listening addr=HOST:PORT" on stdout, and serves until SIGTERM or
// SIGINT, or until its stdin ends (so it does not outlive the benchmark
// that started it; run by hand, end it with Ctrl-D or Ctrl-C).
func Main(args []string) int {
	fs := flag.NewFlagSet("bench floor", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "`address` to listen on")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ln, err := Listen(*listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		return 1
	}
	fmt.Printf("listening addr=%s\n", ln.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	var s Server
	if err := s.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		return 1
	}
	return 0
}

// Process is one running `bench floor`.
type Process struct {
	Addr  string
	cmd   *exec.Cmd
	stdin io.Closer
	done  chan struct{}
}

// Start runs `self floor` (self is the benchmark binary) and waits for the
// address it listens on.
func Start(ctx context.Context, self string) (*Process, error) {
	cmd := exec.Command(self, "floor")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "listening addr="); ok {
				select {
				case addrc <- a:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() { _ = cmd.Wait(); close(p.done) }()
	select {
	case p.Addr = <-addrc:
		return p, nil
	case <-p.done:
		return nil, errors.New("bench floor exited before listening")
	case <-time.After(10 * time.Second):
		p.Stop()
		return nil, errors.New("bench floor did not print its address within 10 s")
	case <-ctx.Done():
		p.Stop()
		return nil, ctx.Err()
	}
}

// PID is the floor server's process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Stop ends the floor server (closing its stdin, then SIGTERM), killing it
// after 5 s.
func (p *Process) Stop() {
	_ = p.stdin.Close()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
