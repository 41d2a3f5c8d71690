package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/monolock/monolock/go/client"
	"github.com/monolock/monolock/go/testkit/pipe"
)

// session is one session command: a client.Session (protocol version 4)
// that the acquires naming it put their claims on.
type session struct {
	id     string
	out    *pipe.Writer
	opts   []client.Option
	ctx    context.Context // bounds the opening; cancelled by close
	cancel context.CancelFunc
	ready  chan struct{} // closed once the opening is over: s or err is set

	s   *client.Session // nil when the opening failed
	err error

	mu      sync.Mutex
	pending []*claim // wait claims whose Acquire has not returned, in command order
	all     []*claim // every claim put on the session
	closed  bool
	last    *queued // the latest claim's: the next one is sent after it
}

// queued orders a session's claims as their commands came. Each claim's
// goroutine calls Acquire only once the previous claim's OPEN is queued on
// the session (or its Acquire has returned), so stream ids, and so the
// server's grants and tokens, follow the commands (the scenario
// session-pipelined-acquires checks it) while the claims stay pipelined:
// none waits for another's grant.
//
// The client has no call that returns once a claim is queued, so this
// reads it off the context: Session.Acquire queues the OPEN before it
// first waits on ctx.Done(). Should that change, the order becomes
// goroutine order again (a scenario miss), never a hang: the mark is also
// set when Acquire returns.
type queued struct {
	after <-chan struct{} // the previous claim's mark; nil for the first
	mark  chan struct{}
	once  sync.Once
}

func (q *queued) set() { q.once.Do(func() { close(q.mark) }) }

// queuedCtx is the context a session claim's Acquire gets: its first Done
// sets the mark.
type queuedCtx struct {
	context.Context
	q *queued
}

func (c queuedCtx) Done() <-chan struct{} {
	c.q.set()
	return c.Context.Done()
}

func newSession(c pipe.Command, out *pipe.Writer) (*session, error) {
	if c.ID == "" || c.LeaseMS == nil {
		return nil, errors.New("session needs id and lease_ms")
	}
	s := &session{id: c.ID, out: out, ready: make(chan struct{})}
	// As for an acquire: leases beyond a Duration are refused all the same.
	leaseMS := min(*c.LeaseMS, 1<<40)
	s.opts = []client.Option{
		client.WithServers(c.Servers...),
		client.WithLease(time.Duration(leaseMS) * time.Millisecond),
		client.WithOnWaiting(s.waiting),
	}
	if c.ConnectTimeoutMS != nil && *c.ConnectTimeoutMS > 0 {
		s.opts = append(s.opts, client.WithDialTimeout(time.Duration(*c.ConnectTimeoutMS)*time.Millisecond))
	}
	if c.TLS != nil {
		cfg, err := tlsConfig(c.TLS)
		if err != nil {
			return nil, fmt.Errorf("session %q: %w", c.ID, err)
		}
		s.opts = append(s.opts, client.WithTLS(cfg))
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if c.TimeoutMS != nil {
		s.ctx, s.cancel = context.WithTimeout(context.Background(), time.Duration(*c.TimeoutMS)*time.Millisecond)
	}
	return s, nil
}

func (s *session) emit(ev pipe.Event) {
	ev.ID = s.id
	s.out.Emit(ev)
}

// open opens the session and prints opened, or error as a failed
// try-acquire would (nothing when close came first).
func (s *session) open() {
	defer s.cancel()
	c, err := client.New(s.opts...)
	var cs *client.Session
	if err == nil {
		cs, err = c.Session(s.ctx)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed { // closed while opening: close prints released alone
		if cs != nil {
			cs.Close()
		}
		s.err = fmt.Errorf("session %q: %w", s.id, client.ErrSessionClosed)
		close(s.ready)
		return
	}
	s.s, s.err = cs, err
	close(s.ready)
	if err != nil {
		ev := pipe.Event{Name: pipe.Error, Kind: acquireKind(err), Message: err.Error()}
		var se *client.ServerError
		if errors.As(err, &se) {
			ev.Code, ev.Temporary = wireCode(se.Code, se.Temporary())
		}
		s.emit(ev)
		return
	}
	s.emit(pipe.Event{Name: pipe.Opened})
}

// add puts cl on the session.
func (s *session) add(cl *claim) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.all = append(s.all, cl)
	cl.order = &queued{mark: make(chan struct{})}
	if s.last != nil {
		cl.order.after = s.last.mark
	}
	s.last = cl.order
	if cl.mode == pipe.ModeWait {
		s.pending = append(s.pending, cl)
	}
}

// acquire runs cl's acquisition on the session, once it is open.
func (s *session) acquire(cl *claim) (*client.Lock, error) {
	defer s.returned(cl)
	defer cl.order.set()
	select {
	case <-s.ready:
	case <-cl.ctx.Done():
		return nil, fmt.Errorf("acquire %q on session %q: %w", cl.name, s.id, cl.ctx.Err())
	}
	if s.s == nil {
		return nil, fmt.Errorf("acquire %q: session %q did not open: %w", cl.name, s.id, s.err)
	}
	if cl.order.after != nil {
		select {
		case <-cl.order.after:
		case <-cl.ctx.Done():
			return nil, fmt.Errorf("acquire %q on session %q: %w", cl.name, s.id, cl.ctx.Err())
		}
	}
	ctx := queuedCtx{Context: cl.ctx, q: cl.order}
	if cl.mode == pipe.ModeTry {
		return s.s.TryAcquire(ctx, cl.name, cl.mine...)
	}
	return s.s.Acquire(ctx, cl.name, cl.mine...)
}

// returned takes cl off the claims that may still be told waiting.
func (s *session) returned(cl *claim) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, p := range s.pending {
		if p == cl {
			s.pending = append(s.pending[:i], s.pending[i+1:]...)
			return
		}
	}
}

// waiting is the session's OnWaiting: the client names the lock, not the
// claim, so it goes to the first wait claim of that name not told yet.
// The session calls it on the waiting Acquire's goroutine, before that
// Acquire returns; a session never re-queues, so each claim is told at
// most once. (Two claims of one name pending at once on one session
// could, in a race, be told in the wrong order; no scenario does that.)
func (s *session) waiting(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, cl := range s.pending {
		if cl.name == name && !cl.waited {
			cl.waited = true
			cl.emit(pipe.Event{Name: pipe.Waiting})
			return
		}
	}
}

// close closes the session: its claims end silently (Close releases them
// without reporting a loss) and a pending opening is abandoned. It returns
// once every claim's goroutines are done.
func (s *session) close() {
	s.mu.Lock()
	s.closed = true
	claims := s.all
	s.all, s.pending = nil, nil
	s.mu.Unlock()
	for _, cl := range claims {
		cl.mu.Lock()
		cl.quiet = true
		cl.mu.Unlock()
	}
	s.cancel()
	<-s.ready
	if s.s != nil {
		s.s.Close()
	}
	for _, cl := range claims {
		cl.stop()
	}
}
