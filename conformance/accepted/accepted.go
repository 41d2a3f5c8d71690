// Package accepted keeps the connections a test server has accepted, in
// accept order, and hands them out one by one to the scenario that waits for
// them. The scripted fake server and the fault proxy share it.
package accepted

import (
	"context"
	"errors"
	"sync"
)

// Queue holds accepted connections of type T. The zero value is not ready:
// use New.
type Queue[T any] struct {
	mu      sync.Mutex
	conns   []T // in accept order
	claimed int // conns handed out by Next
	changed chan struct{}
}

// New returns an empty queue.
func New[T any]() *Queue[T] { return &Queue[T]{changed: make(chan struct{})} }

// Add records a newly accepted connection and wakes Next.
func (q *Queue[T]) Add(c T) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.conns = append(q.conns, c)
	close(q.changed)
	q.changed = make(chan struct{})
}

// Next returns the next connection not yet handed out, waiting until ctx
// ends.
func (q *Queue[T]) Next(ctx context.Context) (T, error) {
	for {
		q.mu.Lock()
		if q.claimed < len(q.conns) {
			c := q.conns[q.claimed]
			q.claimed++
			q.mu.Unlock()
			return c, nil
		}
		ch := q.changed
		q.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			var none T
			return none, errors.New("no connection")
		}
	}
}

// All returns every connection accepted so far, handed out or not.
func (q *Queue[T]) All() []T {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]T(nil), q.conns...)
}
