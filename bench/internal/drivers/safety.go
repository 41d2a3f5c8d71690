package drivers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/monolock/monolock/conformance/driver"
	"github.com/monolock/monolock/go/testkit/pipe"
)

// trialSeq numbers the claims of safety trials, so that their ids are
// unique within a driver.
var trialSeq atomic.Int64

// SafetyTrial is one holder claim and one competitor claim in one driver,
// for the safety-margin workload (it satisfies safety.Trial). The holder
// connects through the fault proxy, the competitor straight to the server.
// The holder is told when the driver prints `lost`, which every driver
// prints from its client's push signal; the competitor is granted when the
// driver prints `acquired`. Both instants are when the line reached this
// process (Driver.at), so both carry the same pipe delay.
type SafetyTrial struct {
	d       *Driver
	direct  string
	name    string
	leaseMS int

	hid, cid      string
	told, granted chan time.Time
	toldOnce      sync.Once
	grantOnce     sync.Once
	hrel, crel    chan struct{} // closed at the claim's released event
	quit          chan struct{}
	quitOnce      sync.Once
	holding       bool
	competing     bool
}

// NewSafetyTrial prepares a trial on lock name; direct is the server's own
// address, for the competitor.
func (d *Driver) NewSafetyTrial(direct, name string, lease time.Duration) *SafetyTrial {
	n := trialSeq.Add(1)
	return &SafetyTrial{
		d: d, direct: direct, name: name, leaseMS: int(lease / time.Millisecond),
		hid: fmt.Sprintf("s%d-holder", n), cid: fmt.Sprintf("s%d-competitor", n),
		told: make(chan time.Time, 1), granted: make(chan time.Time, 1),
		hrel: make(chan struct{}), crel: make(chan struct{}), quit: make(chan struct{}),
	}
}

// Told delivers the instant the holder's `lost` line arrived.
func (t *SafetyTrial) Told() <-chan time.Time { return t.told }

// Granted delivers the instant the competitor's `acquired` line arrived.
func (t *SafetyTrial) Granted() <-chan time.Time { return t.granted }

// follow dispatches the events of one claim until its released event, the
// driver's exit or Close giving up on it.
func (t *SafetyTrial) follow(ch chan driver.Event, rel chan struct{}, on func(driver.Event)) {
	go func() {
		for {
			select {
			case ev := <-ch:
				if ev.Name == pipe.Released {
					close(rel)
					return
				}
				on(ev)
			case <-t.d.exited():
				return
			case <-t.quit:
				return
			}
		}
	}()
}

func (t *SafetyTrial) acquire(id, server string, timeout time.Duration) error {
	lease, timeoutMS, connectMS := uint64(t.leaseMS), timeout.Milliseconds(), int64(5000)
	return t.d.send(pipe.Command{Cmd: pipe.Acquire, ID: id, Servers: []string{server}, Name: &t.name,
		LeaseMS: &lease, Mode: pipe.ModeWait, TimeoutMS: &timeoutMS, ConnectTimeoutMS: &connectMS})
}

// outcome waits for the first event on c, ctx or the driver's exit.
func (t *SafetyTrial) outcome(ctx context.Context, c chan driver.Event, want string) error {
	select {
	case ev := <-c:
		if ev.Name == want || ev.Name == pipe.Acquired {
			return nil
		}
		return failure(ev)
	case <-t.d.exited():
		return errors.New("driver exited")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Hold acquires the lock through addr and returns once it is held.
func (t *SafetyTrial) Hold(ctx context.Context, addr string) error {
	first := make(chan driver.Event, 1)
	t.follow(t.d.expect(t.hid), t.hrel, func(ev driver.Event) {
		switch ev.Name {
		case pipe.Lost:
			t.toldOnce.Do(func() { t.told <- t.d.at(ev) })
		case pipe.Acquired, pipe.Error, pipe.DriverError:
			select {
			case first <- ev:
			default:
			}
		}
	})
	t.holding = true
	if err := t.acquire(t.hid, addr, 15*time.Second); err != nil {
		return err
	}
	return t.outcome(ctx, first, pipe.Acquired)
}

// Compete queues the competitor on the direct address and returns once it
// is waiting (or, unexpectedly, granted: the caller checks Granted).
func (t *SafetyTrial) Compete(ctx context.Context) error {
	first := make(chan driver.Event, 1)
	t.follow(t.d.expect(t.cid), t.crel, func(ev driver.Event) {
		switch ev.Name {
		case pipe.Acquired:
			t.grantOnce.Do(func() { t.granted <- t.d.at(ev) })
		}
		switch ev.Name {
		case pipe.Waiting, pipe.Acquired, pipe.Error, pipe.DriverError:
			select {
			case first <- ev:
			default:
			}
		}
	})
	t.competing = true
	// Long enough for every fault; Close releases it earlier.
	if err := t.acquire(t.cid, t.direct, 2*time.Minute); err != nil {
		return err
	}
	return t.outcome(ctx, first, pipe.Waiting)
}

// Close releases both claims (the driver answers release in any state)
// and waits up to 5 s for each released event.
func (t *SafetyTrial) Close() {
	wait := func(id string, on bool, rel chan struct{}) {
		if !on {
			return
		}
		defer t.d.forget(id)
		if t.d.send(pipe.Command{Cmd: pipe.Release, ID: id}) != nil {
			return
		}
		select {
		case <-rel:
		case <-t.d.exited():
		case <-time.After(5 * time.Second):
		}
	}
	wait(t.hid, t.holding, t.hrel)
	wait(t.cid, t.competing, t.crel)
	t.quitOnce.Do(func() { close(t.quit) })
}
