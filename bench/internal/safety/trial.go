package safety

import (
	"context"
	"sync"
	"time"
)

// events is what every trial shares: the two one-shot instants and a stop
// channel for its goroutines.
type events struct {
	told, granted chan time.Time
	stop          chan struct{}
	toldOnce      sync.Once
	grantOnce     sync.Once
	stopOnce      sync.Once
}

func newEvents() events {
	return events{told: make(chan time.Time, 1), granted: make(chan time.Time, 1), stop: make(chan struct{})}
}

func (e *events) Told() <-chan time.Time    { return e.told }
func (e *events) Granted() <-chan time.Time { return e.granted }

// tell records the holder's told instant, once.
func (e *events) tell(at time.Time) { e.toldOnce.Do(func() { e.told <- at }) }

// grant records the competitor's grant instant, once.
func (e *events) grant(at time.Time) { e.grantOnce.Do(func() { e.granted <- at }) }

// halt stops the trial's goroutines: what they notice after this is
// cleanup, not a measurement.
func (e *events) halt() { e.stopOnce.Do(func() { close(e.stop) }) }

func (e *events) stopped() bool {
	select {
	case <-e.stop:
		return true
	default:
		return false
	}
}

// waitFor polls cond every 20 ms until it holds, ctx ends or stop closes.
func (e *events) waitFor(ctx context.Context, cond func() bool) error {
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

// settle waits d (for recipes whose queue cannot be observed).
func (e *events) settle(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
