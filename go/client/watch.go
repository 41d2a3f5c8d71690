package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/monolock/monolock/go/client/internal/backoff"
	"github.com/monolock/monolock/go/client/internal/heartbeat"
	"github.com/monolock/monolock/go/client/internal/watchview"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// Watch follows one lock name (protocol version 3): its holders with
// their values, its queue, and every change, in the server's order. It
// reconnects by itself, resuming where it left off, and follows the
// active server of an HA cell.
//
// Its state is vouched for only until the send of its last acknowledged
// heartbeat plus 0.8 x lease, as a lock's is: after that, and whenever it
// is between connections, State reports Known false, never the last
// holder it saw.
type Watch struct {
	name   string
	client *Client
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	core    *watchview.Core // the picture, and how long it is vouched for
	err     error           // why the watch ended for good
	changed chan struct{}
}

// LockState is a watch's picture of its name.
type LockState struct {
	// Known: the picture is vouched for now. When false, the rest is the
	// last picture that was, and must not be acted on.
	Known      bool
	ValidUntil time.Time
	Holders    []Holder // in grant order
	Waiters    []Waiter // in queue order
	// BlockedUntil: nobody is granted the name before it, because the
	// server waits out holders it does not know (after a restart or a
	// failover).
	BlockedUntil time.Time
	// Epoch and Seq say which event of the name's history the picture
	// includes last.
	Epoch, Seq uint64
}

// Holder is a holder of a watched name.
type Holder = watchview.Holder

// Waiter is a claim queued for a watched name.
type Waiter = watchview.Waiter

// Watch starts following name. It returns once the first picture is
// known, or with the error that keeps the server from answering (the ACL,
// a server that does not know version 3), or when ctx ends first. The
// watch then runs until Close.
func (c *Client) Watch(ctx context.Context, name string) (*Watch, error) {
	if _, err := protocol.AppendWatch(nil, protocol.Watch{LeaseMS: c.cfg.leaseMS, Name: name}); err != nil {
		if errors.Is(err, protocol.ErrNameTooLong) {
			return nil, nameTooLongError(name)
		}
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	w := &Watch{name: name, client: c, cancel: cancel, done: make(chan struct{}), changed: make(chan struct{}, 1),
		core: watchview.NewCore(c.cfg.lease)}
	go w.run(runCtx)
	for {
		st := w.State()
		if st.Known {
			return w, nil
		}
		select {
		case <-w.changed:
		case <-w.done:
			return nil, w.Err()
		case <-ctx.Done():
			w.Close()
			return nil, errorf("watch %q: %w", name, ctx.Err())
		}
	}
}

// Name is the watched name.
func (w *Watch) Name() string { return w.name }

// State returns the current picture. Known is decided at the call, on
// the monotonic clock: a watch whose server went silent reads unknown at
// its deadline even if nothing has run since.
func (w *Watch) State() LockState {
	w.mu.Lock()
	defer w.mu.Unlock()
	return stateOf(w.core, time.Now())
}

// stateOf is the core's picture as a LockState at now.
func stateOf(c *watchview.Core, now time.Time) LockState {
	v := c.Clone()
	return LockState{
		Known: c.Known(now), ValidUntil: c.ValidUntil(), Holders: v.Holders, Waiters: v.Waiters,
		BlockedUntil: v.BlockedUntil, Epoch: v.Epoch, Seq: v.Seq,
	}
}

// Changed is signalled after every change of the picture, and when it
// stops being vouched for. It is a signal, not a queue: read State after
// it.
func (w *Watch) Changed() <-chan struct{} { return w.changed }

// Done is closed when the watch has ended: Close, or an error that
// retrying cannot cure (Err).
func (w *Watch) Done() <-chan struct{} { return w.done }

// Err is why the watch ended (nil while it runs, and after Close).
func (w *Watch) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Close ends the watch and its connection.
func (w *Watch) Close() {
	w.cancel()
	<-w.done
}

func (w *Watch) signal() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// run keeps a connection to a server that answers, from one to the next:
// a silent or lost connection is retried with backoff, an HA cell's
// passive server sends it to the active one, and a terminal error ends
// the watch.
func (w *Watch) run(ctx context.Context) {
	defer close(w.done)
	defer w.signal()
	servers := w.client.cfg.servers
	var b backoff.Backoff
	next := 0
	for ctx.Err() == nil {
		addr := servers[next%len(servers)]
		next++
		vouched, err := w.connect(ctx, addr)
		w.mu.Lock()
		w.core.Disconnected()
		w.mu.Unlock()
		w.signal()
		if vouched {
			b.Reset()
		}
		var se *ServerError
		switch {
		case ctx.Err() != nil:
			return
		case errors.As(err, &se) && se.Code == protocol.ErrNotActive.Code:
			if i := leaderIndex(servers, se.Reason); i >= 0 {
				next = i
				continue // no backoff: a passive answer is no failure
			}
		case errors.As(err, &se) && !se.Temporary(), errors.Is(err, protocol.ErrUnsupportedVersion):
			w.mu.Lock()
			w.err = err
			w.mu.Unlock()
			return
		}
		w.client.cfg.logger.Debug("monolock: watch connection ended; reconnecting", "lock", w.name, "server", addr, "err", err)
		if !sleep(ctx, b.Next()) {
			return
		}
	}
}

// watchFrame is one server frame of a watch, or the error that ended the
// reading.
type watchFrame struct {
	t          uint8
	event      protocol.Event
	epoch, seq uint64
	err        error
}

// connect runs one connection until it fails or ctx ends. vouched says
// whether the server answered a request on it.
func (w *Watch) connect(ctx context.Context, addr string) (vouched bool, err error) {
	conn, raw, err := w.client.dialOne(ctx, addr)
	if err != nil {
		return false, err
	}
	defer raw.Close()
	w.mu.Lock()
	frame, err := protocol.AppendWatch(nil, protocol.Watch{LeaseMS: w.client.cfg.leaseMS, Name: w.name, Epoch: w.core.Epoch, Seq: w.core.Seq})
	w.mu.Unlock()
	if err != nil {
		return false, err
	}
	frames, stop := make(chan watchFrame, 64), make(chan struct{})
	defer close(stop) // before the close of raw: the reader then returns
	go readWatchFrames(conn, frames, stop)
	c := watchConn{w: w, conn: conn, sched: *heartbeat.New(w.client.cfg.lease)}
	if err := c.send(frame); err != nil {
		return false, err
	}
	return c.serve(ctx, frames)
}

// watchConn is one connection of a watch: one request in flight at a
// time (the WATCH, then HEARTBEATs), each answered by a WATCHING. The
// core keeps the request's state; sched says when the next is due.
type watchConn struct {
	w       *Watch
	conn    net.Conn
	sched   heartbeat.Schedule
	vouched bool
}

func (c *watchConn) send(frame []byte) error {
	now := time.Now()
	c.w.mu.Lock()
	c.w.core.Sent(now)
	c.w.mu.Unlock()
	_ = c.conn.SetWriteDeadline(now.Add(c.sched.ClientTimeout()))
	_, err := c.conn.Write(frame)
	return err
}

// request is the core's request state.
func (c *watchConn) request() (inFlight bool, lastSend time.Time) {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	return c.w.core.InFlight()
}

func (c *watchConn) serve(ctx context.Context, frames <-chan watchFrame) (bool, error) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		now := time.Now()
		inFlight, lastSend := c.request()
		if inFlight && !now.Before(lastSend.Add(c.sched.ClientTimeout())) {
			return c.vouched, errorf("%w", &clientTimeoutError{leaseMS: c.w.client.cfg.leaseMS})
		}
		if !inFlight && !now.Before(lastSend.Add(c.sched.Interval())) {
			if err := c.send([]byte{protocol.MsgHeartbeat}); err != nil {
				return c.vouched, err
			}
		}
		timer.Reset(time.Until(c.wakeAt()))
		select {
		case <-ctx.Done():
			return c.vouched, ctx.Err()
		case <-timer.C:
			c.w.signal() // the picture may have stopped being vouched for
		case f := <-frames:
			if err := c.take(f); err != nil {
				return c.vouched, err
			}
		}
	}
}

// wakeAt is when serve must look again: the deadline of the request in
// flight, or the next heartbeat; and the end of the picture's validity,
// so that Changed tells of it.
func (c *watchConn) wakeAt() time.Time {
	inFlight, lastSend := c.request()
	next := lastSend.Add(c.sched.Interval())
	if inFlight {
		next = lastSend.Add(c.sched.ClientTimeout())
	}
	c.w.mu.Lock()
	validUntil := c.w.core.ValidUntil()
	c.w.mu.Unlock()
	if validUntil.After(time.Now()) && validUntil.Before(next) {
		return validUntil
	}
	return next
}

// take applies one frame: an event to the picture, a WATCHING as the
// acknowledgement of the request in flight.
func (c *watchConn) take(f watchFrame) error {
	w := c.w
	switch {
	case f.err != nil:
		return f.err
	case f.t == protocol.MsgEvent:
		w.mu.Lock()
		err := w.core.Event(f.event, time.Now())
		w.mu.Unlock()
		if err != nil {
			return errorf("%w: %w", ErrProtocol, err)
		}
		w.signal()
		return nil
	}
	// WATCHING: the picture is whole up to (epoch, seq).
	w.mu.Lock()
	_, lastSend := w.core.InFlight()
	err := w.core.Watching(f.epoch, f.seq)
	w.mu.Unlock()
	if err != nil {
		return errorf("%w: %w", ErrProtocol, err)
	}
	c.sched.Observe(time.Since(lastSend))
	c.vouched = true
	w.signal()
	return nil
}

// readWatchFrames reads the server's frames into out until the connection
// fails, and sends that error last; it gives up sending once stop closes.
func readWatchFrames(conn net.Conn, out chan<- watchFrame, stop <-chan struct{}) {
	r := bufio.NewReader(conn)
	for {
		f, err := readWatchFrame(r)
		if err != nil {
			f.err = err
		}
		select {
		case out <- f:
		case <-stop:
			return
		}
		if err != nil {
			return
		}
	}
}

func readWatchFrame(r *bufio.Reader) (watchFrame, error) {
	t, err := r.ReadByte()
	if err != nil {
		return watchFrame{}, err
	}
	f := watchFrame{t: t}
	switch t {
	case protocol.MsgEvent:
		f.event, err = protocol.ReadEventBody(r)
	case protocol.MsgWatching:
		f.epoch, f.seq, err = protocol.ReadWatchingBody(r)
	case protocol.MsgError:
		// An ERROR ends the watch at its type byte: what of it arrived
		// is enough.
		code, reason, rerr := protocol.ReadErrorBody(r)
		if rerr != nil && code == 0 {
			return f, ErrServerEnded
		}
		if code == protocol.ErrUnsupportedVersion.Code {
			return f, fmt.Errorf("%w: %w", &ServerError{Code: code, Reason: reason}, protocol.ErrUnsupportedVersion)
		}
		return f, &ServerError{Code: code, Reason: reason}
	default:
		return f, errorf("%w: unknown message type 0x%02x", ErrProtocol, t)
	}
	if err != nil {
		return f, errorf("%w: %w", ErrProtocol, err)
	}
	return f, nil
}
