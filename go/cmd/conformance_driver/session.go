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

// session is a session command's session (protocol version 4), which
// acquires with its id put their claims on.
type session struct {
	id     string
	out    *pipe.Writer
	client *client.Client
	ctx    context.Context
	cancel context.CancelFunc
	opened chan struct{} // closed once the open ended; s is set if it succeeded

	mu      sync.Mutex
	s       *client.Session
	waiting map[string][]*claim // claims whose OPEN waits for its reply, by name
}

var errSessionNotOpen = errors.New("the session is not open")

func newSession(c pipe.Command, out *pipe.Writer) (*session, error) {
	if c.ID == "" || c.LeaseMS == nil {
		return nil, errors.New("session needs id and lease_ms")
	}
	sess := &session{id: c.ID, out: out, opened: make(chan struct{}), waiting: map[string][]*claim{}}
	opts := []client.Option{
		client.WithServers(c.Servers...),
		client.WithLease(time.Duration(min(*c.LeaseMS, 1<<40)) * time.Millisecond),
		// The client tells of a WAITING by lock name: the claim that waits
		// for its OPEN's reply on that name is the one to print it.
		client.WithOnWaiting(sess.onWaiting),
	}
	if c.TLS != nil {
		cfg, err := tlsConfig(c.TLS)
		if err != nil {
			return nil, fmt.Errorf("session %q: %w", c.ID, err)
		}
		opts = append(opts, client.WithTLS(cfg))
	}
	cl, err := client.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("session %q: %w", c.ID, err)
	}
	sess.client = cl
	sess.ctx, sess.cancel = context.WithCancel(context.Background())
	return sess, nil
}

// open opens the session and prints opened, or error as a failed
// try-acquire would.
func (sess *session) open() {
	defer close(sess.opened)
	s, err := sess.client.Session(sess.ctx)
	if err != nil {
		ev := &claim{id: sess.id, out: sess.out}
		ev.emitFailure(pipe.Error, acquireKind(err), err)
		return
	}
	sess.mu.Lock()
	sess.s = s
	sess.mu.Unlock()
	sess.out.Emit(pipe.Event{Name: pipe.Opened, ID: sess.id})
}

// acquire takes cl's claim on the session.
func (sess *session) acquire(cl *claim) (*client.Lock, error) {
	<-sess.opened
	sess.mu.Lock()
	s := sess.s
	if s != nil {
		sess.waiting[cl.name] = append(sess.waiting[cl.name], cl)
	}
	sess.mu.Unlock()
	if s == nil {
		return nil, errSessionNotOpen
	}
	defer sess.answered(cl)
	if cl.mode == pipe.ModeTry {
		return s.TryAcquire(cl.ctx, cl.name, cl.mine...)
	}
	return s.Acquire(cl.ctx, cl.name, cl.mine...)
}

// onWaiting prints waiting for the first claim on name still waiting for
// its OPEN's reply.
func (sess *session) onWaiting(name string) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if q := sess.waiting[name]; len(q) > 0 {
		sess.waiting[name] = q[1:]
		q[0].emit(pipe.Event{Name: pipe.Waiting})
	}
}

// answered forgets cl as waiting for its OPEN's reply.
func (sess *session) answered(cl *claim) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	q := sess.waiting[cl.name]
	for i, c := range q {
		if c == cl {
			sess.waiting[cl.name] = append(q[:i:i], q[i+1:]...)
			break
		}
	}
}

// close closes the session, releasing what it holds: its claims report
// released, not lost.
func (sess *session) close() {
	sess.cancel()
	<-sess.opened
	sess.mu.Lock()
	s := sess.s
	sess.mu.Unlock()
	if s != nil {
		s.Close()
	}
}
