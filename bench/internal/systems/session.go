package systems

import (
	"context"
	"sync"

	"github.com/monolock/monolock/go/client"
)

// sessionSystem uses the canonical Go client's sessions (protocol version
// 4): one session per worker, opened with the worker, every claim a
// stream on it; a release waits for the server's RELEASED.
type sessionSystem struct {
	name string
	opts []client.Option
}

// OpenMonolockSession returns the monolock-session system for the server
// at addr.
func OpenMonolockSession(addr string, o Options) (System, error) {
	return OpenMonolockSessionNamed(MonolockSession, addr, o)
}

// OpenMonolockSessionNamed returns the session system name
// (MonolockSession or MonolockSessionTLS) for the server at addr.
func OpenMonolockSessionNamed(name, addr string, o Options) (System, error) {
	opts, err := clientOptions(name, addr, o)
	if err != nil {
		return nil, err
	}
	return &sessionSystem{name: name, opts: opts}, nil
}

func (m *sessionSystem) Name() string { return m.name }
func (m *sessionSystem) Close() error { return nil }

func (m *sessionSystem) Worker(ctx context.Context) (Worker, error) {
	c, err := client.New(m.opts...)
	if err != nil {
		return nil, err
	}
	return &sessionWorker{c: c}, nil
}

// sessionWorker opens its session on its first claim, and again after the
// session ended (a fault of the workload, counted as an error meanwhile).
type sessionWorker struct {
	c  *client.Client
	mu sync.Mutex
	s  *client.Session
}

func (w *sessionWorker) Acquire(ctx context.Context, name string) (Held, error) {
	w.mu.Lock()
	s := w.s
	w.mu.Unlock()
	if s == nil || s.Err() != nil {
		var err error
		if s, err = w.c.Session(ctx); err != nil {
			return nil, err
		}
		w.mu.Lock()
		w.s = s
		w.mu.Unlock()
	}
	l, err := s.Acquire(ctx, name)
	if err != nil {
		return nil, err
	}
	return l, nil
}

func (w *sessionWorker) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.s != nil {
		return w.s.Close()
	}
	return nil
}
