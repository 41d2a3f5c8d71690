// Package drivers benchmarks the other languages' clients through their
// conformance drivers. conformance/driver runs each driver process and
// speaks its JSON-lines pipe (docs/writing-a-client.md); this package hands
// each event to the workload waiting for its id, timed where the benchmark
// read it.
package drivers

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/monolock/monolock/conformance/driver"
	"github.com/monolock/monolock/conformance/runner"
	"github.com/monolock/monolock/go/testkit/pipe"
)

// Driver is one running driver process.
type Driver struct {
	p     *driver.Process
	start time.Time // the events' At counts from here
	wmu   sync.Mutex

	mu      sync.Mutex
	waiters map[string]chan driver.Event // by id
}

// Start runs c's driver in root/c.Dir and waits up to 60 s for its ready
// event.
func Start(ctx context.Context, root string, c runner.Client) (*Driver, error) {
	d := &Driver{start: time.Now(), waiters: map[string]chan driver.Event{}}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	// Streamed, not kept: a workload's events would fill the history.
	p, _, err := driver.StartStream(ctx, filepath.Join(root, c.Dir), c.Run, c.ExtraEnv(), d.start, d.route)
	if err != nil {
		return nil, err
	}
	d.p = p
	return d, nil
}

// route hands ev to whoever expects its id; nobody may, then it is dropped.
func (d *Driver) route(ev driver.Event) {
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

// at is when the event's line reached this process.
func (d *Driver) at(ev driver.Event) time.Time { return d.start.Add(ev.At) }

// exited is closed once the driver process has exited.
func (d *Driver) exited() <-chan struct{} { return d.p.Exited() }

// failure describes an error, lost or driver_error event.
func failure(ev driver.Event) error {
	return fmt.Errorf("%s: %s %s", ev.Name, ev.Kind, ev.Message)
}

// send writes one command line; the workers of a workload share the pipe.
func (d *Driver) send(cmd pipe.Command) error {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	return d.p.Send(cmd)
}

// expect registers id for events; the channel gets every event of id.
func (d *Driver) expect(id string) chan driver.Event {
	ch := make(chan driver.Event, 8)
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
func (d *Driver) wait(ch chan driver.Event, timeout time.Duration, names ...string) (driver.Event, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case ev := <-ch:
			for _, n := range names {
				if ev.Name == n {
					return ev, nil
				}
			}
			if ev.Failure() {
				return ev, failure(ev)
			}
		case <-d.exited():
			return driver.Event{}, errors.New("driver exited")
		case <-t.C:
			return driver.Event{}, fmt.Errorf("no %v within %v", names, timeout)
		}
	}
}

// Close asks the driver to quit and kills it if it does not within 5 s.
func (d *Driver) Close() {
	_ = d.p.Quit(5 * time.Second)
}
