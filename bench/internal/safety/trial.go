package safety

import (
	"context"
	"sync"
	"time"
)

// Events is what every trial shares (a Trial embeds it): the two one-shot
// instants and a stop channel for its goroutines.
type Events struct {
	told, granted chan time.Time
	stop          chan struct{}
	toldOnce      sync.Once
	grantOnce     sync.Once
	stopOnce      sync.Once
}

// NewEvents returns the events of a new trial.
func NewEvents() Events {
	return Events{told: make(chan time.Time, 1), granted: make(chan time.Time, 1), stop: make(chan struct{})}
}

func (e *Events) Told() <-chan time.Time    { return e.told }
func (e *Events) Granted() <-chan time.Time { return e.granted }

// Tell records the holder's told instant, once.
func (e *Events) Tell(at time.Time) { e.toldOnce.Do(func() { e.told <- at }) }

// Grant records the competitor's grant instant, once.
func (e *Events) Grant(at time.Time) { e.grantOnce.Do(func() { e.granted <- at }) }

// Halt stops the trial's goroutines: what they notice after this is
// cleanup, not a measurement.
func (e *Events) Halt() { e.stopOnce.Do(func() { close(e.stop) }) }

// Halted is closed by Halt.
func (e *Events) Halted() <-chan struct{} { return e.stop }

// Stopped reports whether Halt was called.
func (e *Events) Stopped() bool {
	select {
	case <-e.stop:
		return true
	default:
		return false
	}
}

// WaitFor polls cond every 20 ms until it holds, ctx ends or stop closes.
func (e *Events) WaitFor(ctx context.Context, cond func() bool) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return errNotQueued
		case <-e.stop:
			return errNotQueued
		case <-t.C:
		}
	}
	return nil
}

// Settle waits d (for recipes whose queue cannot be observed).
func (e *Events) Settle(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
