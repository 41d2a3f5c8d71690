// Command conformance_driver is the conformance driver of the canonical Go
// client (github.com/monolock/monolock/go/client). It speaks the pipe
// protocol of docs/writing-a-client.md: JSON commands on stdin, JSON events
// on stdout, one object per line. It uses the client's public API only.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/monolock/monolock/go/client"
	"github.com/monolock/monolock/go/pkg/protocol"
	"github.com/monolock/monolock/go/testkit/pipe"
)

// tlsConfig builds the client's TLS configuration from the files.
func tlsConfig(t *pipe.TLS) (*tls.Config, error) {
	f := client.TLSFiles{CA: t.CAFile, Cert: t.CertFile, Key: t.KeyFile}
	if t.ServerName != nil {
		f.ServerName = *t.ServerName
	}
	return client.TLSFromFiles(f)
}

func main() {
	o := pipe.NewWriter(os.Stdout)
	o.Ready("go", "cancel", "election", "invalid_utf8_names", "sessions", "shared", "tls")
	d := &driver{out: o, claims: map[string]*claim{}, observers: map[string]*observer{}, sessions: map[string]*session{}}
	pipe.ReadCommands(os.Stdin, o, d.handle)
	d.closeAll()
}

type driver struct {
	out       *pipe.Writer
	claims    map[string]*claim
	observers map[string]*observer
	sessions  map[string]*session
}

func (d *driver) driverError(format string, args ...any) {
	d.out.DriverError(fmt.Sprintf(format, args...))
}

func (d *driver) handle(c pipe.Command) {
	switch c.Cmd {
	case pipe.Acquire:
		if old := d.claims[c.ID]; old != nil && !old.finished() {
			d.driverError("id %q is still in use", c.ID)
			return
		}
		if d.observers[c.ID] != nil || d.sessions[c.ID] != nil {
			d.driverError("id %q is already used", c.ID)
			return
		}
		var sess *session
		if c.Session != "" {
			if sess = d.sessions[c.Session]; sess == nil {
				d.driverError("acquire %q: unknown session %q", c.ID, c.Session)
				return
			}
		}
		cl, err := newClaim(c, d.out, sess)
		if err != nil {
			d.driverError("%v", err)
			return
		}
		d.claims[c.ID] = cl
		if sess != nil {
			sess.add(cl)
		}
		go cl.acquire()
	case pipe.Session:
		if d.claims[c.ID] != nil || d.observers[c.ID] != nil || d.sessions[c.ID] != nil {
			d.driverError("id %q is already used", c.ID)
			return
		}
		s, err := newSession(c, d.out)
		if err != nil {
			d.driverError("%v", err)
			return
		}
		d.sessions[c.ID] = s
		go s.open()
	case pipe.Observe:
		if d.claims[c.ID] != nil || d.observers[c.ID] != nil || d.sessions[c.ID] != nil {
			d.driverError("id %q is already used", c.ID)
			return
		}
		ob, err := newObserver(c, d.out)
		if err != nil {
			d.driverError("%v", err)
			return
		}
		d.observers[c.ID] = ob
		go ob.run()
	case pipe.Proclaim:
		cl := d.claims[c.ID]
		if cl == nil || c.Value == nil {
			d.driverError("proclaim needs the id of a claim and a value")
			return
		}
		go cl.proclaim(*c.Value)
	case pipe.Release, pipe.Cancel:
		if ob := d.observers[c.ID]; ob != nil && c.Cmd == pipe.Release {
			ob.stop()
			ob.emit(pipe.Event{Name: pipe.Released})
			return
		}
		if s := d.sessions[c.ID]; s != nil {
			if c.Cmd == pipe.Release {
				s.close()
				s.emit(pipe.Event{Name: pipe.Released})
			}
			return
		}
		cl := d.claims[c.ID]
		if cl == nil {
			d.driverError("unknown id %q", c.ID)
			return
		}
		if c.Cmd == pipe.Release {
			cl.release()
		} else {
			cl.cancelWait()
		}
	default:
		d.driverError("unknown command %q", c.Cmd)
	}
}

// closeAll ends every claim quietly: quit releases everything.
func (d *driver) closeAll() {
	// Sessions first, in parallel (a close may wait up to a second for
	// the server): closing one lets all its claims go at once.
	var wg sync.WaitGroup
	for _, s := range d.sessions {
		wg.Go(s.close)
	}
	wg.Wait()
	for _, cl := range d.claims {
		cl.quit()
	}
	for _, ob := range d.observers {
		ob.stop()
	}
}

// claim is one acquire command and the lock it leads to.
type claim struct {
	id   string
	out  *pipe.Writer
	name string
	mode string
	opts []client.Option
	mine []client.AcquireOption // shared, limit
	ctx  context.Context
	sess *session // the session the claim is on; nil: a connection of its own
	// waited: the claim's waiting event is out (sess.mu's).
	waited bool
	order  *queued // a session claim's place in the session's order

	cancel   context.CancelFunc
	acquired chan struct{} // closed when Acquire has returned and its event is out

	mu      sync.Mutex
	quiet   bool         // release or quit during the wait: no error event
	lock    *client.Lock // set once granted
	watched chan struct{}
	ended   bool // no lock held any more (failed, lost or released)
}

func newClaim(c pipe.Command, out *pipe.Writer, sess *session) (*claim, error) {
	cl := &claim{id: c.ID, out: out, mode: c.Mode, acquired: make(chan struct{}), sess: sess}
	switch {
	case c.ID == "":
		return nil, errors.New("acquire without id")
	case c.Mode != pipe.ModeWait && c.Mode != pipe.ModeTry:
		return nil, fmt.Errorf("acquire %q: mode must be wait or try, not %q", c.ID, c.Mode)
	case c.LeaseMS == nil && sess == nil:
		return nil, fmt.Errorf("acquire %q: no lease_ms", c.ID)
	}
	// Go strings hold any bytes: invalid UTF-8 reaches the client.
	name, err := c.LockName()
	if err != nil {
		return nil, fmt.Errorf("acquire %q: %w", c.ID, err)
	}
	cl.name = name
	cl.setMine(c)
	cl.ctx, cl.cancel = context.WithCancel(context.Background())
	if c.TimeoutMS != nil {
		cl.ctx, cl.cancel = context.WithTimeout(context.Background(), time.Duration(*c.TimeoutMS)*time.Millisecond)
	}
	if sess != nil { // servers, lease and tls are the session's
		return cl, nil
	}
	// Leases beyond what a Duration holds are refused by the client all the
	// same; clamp so that the conversion cannot overflow.
	leaseMS := min(*c.LeaseMS, 1<<40)
	cl.opts = []client.Option{
		client.WithServers(c.Servers...),
		client.WithLease(time.Duration(leaseMS) * time.Millisecond),
		client.WithOnWaiting(func(string) { cl.emit(pipe.Event{Name: pipe.Waiting}) }),
	}
	if c.ConnectTimeoutMS != nil && *c.ConnectTimeoutMS > 0 {
		cl.opts = append(cl.opts, client.WithDialTimeout(time.Duration(*c.ConnectTimeoutMS)*time.Millisecond))
	}
	if c.TLS != nil {
		cfg, err := tlsConfig(c.TLS)
		if err != nil {
			return nil, fmt.Errorf("acquire %q: %w", c.ID, err)
		}
		cl.opts = append(cl.opts, client.WithTLS(cfg))
	}
	return cl, nil
}

// setMine takes the claim's own options: shared, limit, value.
func (cl *claim) setMine(c pipe.Command) {
	switch {
	case c.Limit != nil && *c.Limit != 0:
		cl.mine = []client.AcquireOption{client.Limit(*c.Limit)}
	case c.Shared:
		cl.mine = []client.AcquireOption{client.Shared()}
	}
	if c.Value != nil {
		cl.mine = append(cl.mine, client.Value([]byte(*c.Value)))
	}
}

// emit writes ev as this claim's.
func (cl *claim) emit(ev pipe.Event) {
	ev.ID = cl.id
	cl.out.Emit(ev)
}

// emitFailure prints an error or lost event with the error's class.
func (cl *claim) emitFailure(event, kind string, err error) {
	ev := pipe.Event{Name: event, Kind: kind, Message: err.Error()}
	var (
		se *client.ServerError
		pe *protocol.Error
	)
	// code and temporary stay null unless there is a wire code.
	switch {
	case errors.As(err, &se):
		ev.Code, ev.Temporary = wireCode(se.Code, se.Temporary())
	case errors.As(err, &pe):
		ev.Code, ev.Temporary = wireCode(pe.Code, pe.Temporary())
	}
	cl.emit(ev)
}

func wireCode(code uint8, temporary bool) (*int, *bool) {
	c := int(code)
	return &c, &temporary
}

// acquireKind classifies the error of a failed acquire.
func acquireKind(err error) string {
	var (
		se *client.ServerError
		pe *protocol.Error
	)
	switch {
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, client.ErrBusy):
		return "busy"
	case errors.As(err, &se), errors.Is(err, client.ErrServerEnded):
		return "server"
	case errors.As(err, &pe):
		return "validation"
	}
	return "connect"
}

// lostKind classifies why a held lock was lost.
func lostKind(err error) string {
	var se *client.ServerError
	switch {
	case errors.As(err, &se), errors.Is(err, client.ErrServerEnded):
		return "server"
	case errors.Is(err, client.ErrClientTimeout):
		return "timeout"
	}
	return "io"
}

func (cl *claim) acquire() {
	defer close(cl.acquired)
	defer cl.cancel()
	lock, err := cl.try()
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if err != nil {
		cl.ended = true
		if !cl.quiet { // a release or quit during the wait ends it silently
			cl.emitFailure(pipe.Error, acquireKind(err), err)
		}
		return
	}
	if cl.quiet { // released while the grant was on its way
		lock.Release()
		cl.ended = true
		return
	}
	cl.lock = lock
	cl.watched = make(chan struct{})
	valid := float64(time.Until(lock.ValidUntil()).Microseconds()) / 1000
	cl.emit(pipe.Event{Name: pipe.Acquired, Token: strconv.FormatUint(lock.Token(), 10), ValidMS: &valid})
	go cl.watch(lock)
}

// try makes the client and runs the acquisition.
func (cl *claim) try() (*client.Lock, error) {
	if cl.sess != nil {
		return cl.sess.acquire(cl)
	}
	c, err := client.New(cl.opts...)
	if err != nil {
		return nil, err
	}
	if cl.mode == pipe.ModeTry {
		return c.TryAcquire(cl.ctx, cl.name, cl.mine...)
	}
	return c.Acquire(cl.ctx, cl.name, cl.mine...)
}

// watch reports the loss of a held lock; a release ends it silently.
func (cl *claim) watch(lock *client.Lock) {
	defer close(cl.watched)
	<-lock.Done()
	if err := lock.Err(); !errors.Is(err, client.ErrReleased) {
		cl.emitFailure(pipe.Lost, lostKind(err), err)
	}
	cl.mu.Lock()
	cl.ended = true
	cl.mu.Unlock()
}

func (cl *claim) finished() bool {
	select {
	case <-cl.acquired:
	default:
		return false
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.ended
}

// stop ends the claim without events of its own: a pending acquisition is
// abandoned, a held lock released. It returns when all is closed and any
// loss event that raced with it is out.
func (cl *claim) stop() {
	cl.mu.Lock()
	cl.quiet = true
	cl.mu.Unlock()
	cl.cancel()
	<-cl.acquired
	cl.mu.Lock()
	lock, watched := cl.lock, cl.watched
	cl.mu.Unlock()
	if lock != nil {
		lock.Release()
		<-watched
	}
}

// release answers the release command: allowed in any state, always
// answered with released.
func (cl *claim) release() {
	cl.stop()
	cl.emit(pipe.Event{Name: pipe.Released})
}

// cancelWait answers the cancel command: it ends a pending acquisition
// (the error event with kind cancelled follows); for a granted or finished
// claim there is nothing to cancel.
func (cl *claim) cancelWait() { cl.cancel() }

func (cl *claim) quit() { cl.stop() }
