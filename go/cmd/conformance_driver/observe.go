package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/monolock/monolock/go/client"
	"github.com/monolock/monolock/go/testkit/pipe"
)

// observer is one observe command: the leader of a name, told as an
// observed event whenever it changes.
type observer struct {
	id     string
	out    *pipe.Writer
	name   string
	opts   []client.Option
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

func newObserver(c pipe.Command, out *pipe.Writer) (*observer, error) {
	if c.ID == "" || c.LeaseMS == nil {
		return nil, errors.New("observe needs id and lease_ms")
	}
	name, err := c.LockName()
	if err != nil {
		return nil, fmt.Errorf("observe %q: %w", c.ID, err)
	}
	ob := &observer{id: c.ID, out: out, name: name, done: make(chan struct{})}
	ob.opts = []client.Option{client.WithServers(c.Servers...),
		client.WithLease(time.Duration(min(*c.LeaseMS, 1<<40)) * time.Millisecond)}
	if c.TLS != nil {
		cfg, err := tlsConfig(c.TLS)
		if err != nil {
			return nil, fmt.Errorf("observe %q: %w", c.ID, err)
		}
		ob.opts = append(ob.opts, client.WithTLS(cfg))
	}
	ob.ctx, ob.cancel = context.WithCancel(context.Background())
	return ob, nil
}

func (ob *observer) emit(ev pipe.Event) {
	ev.ID = ob.id
	ob.out.Emit(ev)
}

// run observes until stop; a failure to start is an error event.
func (ob *observer) run() {
	defer close(ob.done)
	c, err := client.New(ob.opts...)
	if err == nil {
		var changes <-chan client.Observation
		if changes, err = c.Observe(ob.ctx, ob.name); err == nil {
			for o := range changes {
				ob.emit(observed(o))
			}
			return
		}
	}
	if ob.ctx.Err() == nil {
		ob.emit(pipe.Event{Name: pipe.Error, Kind: acquireKind(err), Message: err.Error()})
	}
}

func (ob *observer) stop() {
	ob.cancel()
	<-ob.done
}

// observed is an observation in the pipe's words.
func observed(o client.Observation) pipe.Event {
	ev := pipe.Event{Name: pipe.Observed, Candidates: &o.Candidates}
	switch o.State {
	case client.Leading:
		ev.State = pipe.StateLeader
	case client.NoLeader:
		ev.State = pipe.StateNone
	case client.LeaderHeldBack:
		ev.State = pipe.StateHeldBack
	default:
		ev.State = pipe.StateUnknown
		ev.Candidates = nil
		return ev
	}
	if o.Token != 0 {
		ev.Token = strconv.FormatUint(o.Token, 10)
		v := string(o.Value)
		ev.Value = &v
	}
	return ev
}

// proclaim answers the proclaim command: proclaimed once the server has
// the value; a lock that ends first says so with its lost event.
func (cl *claim) proclaim(value string) {
	<-cl.acquired
	cl.mu.Lock()
	lock := cl.lock
	cl.mu.Unlock()
	if lock == nil {
		return
	}
	if err := lock.Proclaim(context.Background(), []byte(value)); err != nil {
		if !errors.Is(err, lock.Err()) || lock.Err() == nil {
			cl.emitFailure(pipe.Error, acquireKind(err), err)
		}
		return
	}
	cl.emit(pipe.Event{Name: pipe.Proclaimed})
}
