// Package drivers benchmarks the other languages' clients through their
// conformance drivers: the JSON-lines pipe protocol of
// docs/writing-a-client.md, one driver process per client, the runner
// timing commands and events at its end of the pipe.
package drivers

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"
)

// Spec says how to build and start one client's driver.
type Spec struct {
	Name  string   `json:"name"`
	Dir   string   `json:"dir"`   // relative to the repository root
	Build []string `json:"build"` // optional
	Run   []string `json:"run"`
	// Env is added to the environment of build and run.
	Env map[string]string `json:"env,omitempty"`
}

func (s Spec) environ() []string {
	env := os.Environ()
	for k, v := range s.Env {
		env = append(env, k+"="+v)
	}
	return env
}

// Event is one event line of a driver.
type Event struct {
	Event   string `json:"event"`
	ID      string `json:"id"`
	Token   string `json:"token"`
	Kind    string `json:"kind"`
	Message string `json:"message"`
	at      time.Time
}

// Driver is one running driver process.
type Driver struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	wmu   sync.Mutex

	mu      sync.Mutex
	waiters map[string]chan Event // by id
	done    chan struct{}
	readErr error
}

// Start runs spec's driver in root/spec.Dir and waits for its ready event.
func Start(ctx context.Context, root string, spec Spec) (*Driver, error) {
	if len(spec.Run) == 0 {
		return nil, errors.New("no run command")
	}
	cmd := exec.Command(spec.Run[0], spec.Run[1:]...)
	cmd.Dir = root + "/" + spec.Dir
	cmd.Env = spec.environ()
	cmd.Stderr = io.Discard
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	d := &Driver{cmd: cmd, stdin: in, waiters: map[string]chan Event{}, done: make(chan struct{})}
	ready := make(chan struct{}, 1)
	go d.read(out, ready)
	select {
	case <-ready:
		return d, nil
	case <-d.done:
		d.Close()
		return nil, fmt.Errorf("driver exited before ready: %v", d.readErr)
	case <-time.After(60 * time.Second):
		d.Close()
		return nil, errors.New("driver not ready within 60 s")
	case <-ctx.Done():
		d.Close()
		return nil, ctx.Err()
	}
}

func (d *Driver) read(out io.Reader, ready chan<- struct{}) {
	defer close(d.done)
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		var ev Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			continue
		}
		ev.at = time.Now()
		if ev.Event == "ready" {
			select {
			case ready <- struct{}{}:
			default:
			}
			continue
		}
		d.mu.Lock()
		ch := d.waiters[ev.ID]
		d.mu.Unlock()
		if ch != nil {
			select {
			case ch <- ev:
			default: // nobody expects more events for this id
			}
		}
	}
	d.readErr = sc.Err()
}

// send writes one command line.
func (d *Driver) send(cmd map[string]any) error {
	b, err := json.Marshal(cmd)
	if err != nil {
		return err
	}
	d.wmu.Lock()
	defer d.wmu.Unlock()
	_, err = d.stdin.Write(append(b, '\n'))
	return err
}

// expect registers id for events; the channel gets every event of id.
func (d *Driver) expect(id string) chan Event {
	ch := make(chan Event, 8)
	d.mu.Lock()
	d.waiters[id] = ch
	d.mu.Unlock()
	return ch
}

func (d *Driver) forget(id string) {
	d.mu.Lock()
	delete(d.waiters, id)
	d.mu.Unlock()
}

// wait returns the first event on ch whose name is in names.
func (d *Driver) wait(ch chan Event, timeout time.Duration, names ...string) (Event, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case ev := <-ch:
			for _, n := range names {
				if ev.Event == n {
					return ev, nil
				}
			}
			if ev.Event == "error" || ev.Event == "lost" || ev.Event == "driver_error" {
				return ev, fmt.Errorf("%s: %s %s", ev.Event, ev.Kind, ev.Message)
			}
		case <-d.done:
			return Event{}, errors.New("driver exited")
		case <-t.C:
			return Event{}, fmt.Errorf("no %v within %v", names, timeout)
		}
	}
}

// Close asks the driver to quit and kills it if it does not within 5 s.
func (d *Driver) Close() {
	_ = d.send(map[string]any{"cmd": "quit"})
	_ = d.stdin.Close()
	select {
	case <-d.done:
	case <-time.After(5 * time.Second):
		_ = d.cmd.Process.Kill()
	}
	_ = d.cmd.Wait()
}

// BuildAll runs spec.Build in root/spec.Dir, its output to stderr.
func Build(ctx context.Context, root string, spec Spec) error {
	if len(spec.Build) == 0 {
		return nil
	}
	cmd := exec.CommandContext(ctx, spec.Build[0], spec.Build[1:]...)
	cmd.Dir = root + "/" + spec.Dir
	cmd.Env = spec.environ()
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd.Run()
}
