package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/monolock/monolock/go/client/internal/session"
)

// event is what a claim tells the goroutine waiting in Acquire, in order:
// zero or one "waiting", then one outcome (a lock or an error).
type event struct {
	waiting bool
	lock    *Lock
	err     error
	queued  time.Duration // how long the claim had been queued
}

// claim is one connection: one claim on one lock. One goroutine serves it
// (run): it reads, and the read deadline is its timer, so a claim costs no
// other goroutine and no channel hop. Every protocol decision is made by
// the pure session core; run only does the I/O the core asks for.
//
// The core sits behind mu because the application polls it too: Lock.Err
// past the deadline decides the loss itself, once, and whichever side sees
// the deadline first decides for both.
type claim struct {
	conn   net.Conn // TLS or TCP
	raw    net.Conn // the TCP connection, closed to end the claim
	addr   string   // the server as configured, for messages
	name   string
	log    *slog.Logger
	events chan event    // run -> Acquire
	exited chan struct{} // closed when run has returned and the connection is closed

	mu       sync.Mutex
	core     *session.Core
	ended    chan struct{} // Lock.Done: closed when the lock is no longer valid
	err      error         // Lock.Err once ended: ErrReleased or the loss
	letGo    bool          // the application released or gave up: close at once
	graceful bool          // letGo on a valid lock: hand it back and wait for the server
	queuedAt time.Time
}

func startClaim(conn, raw net.Conn, addr, name string, acquire []byte, try bool, cfg *config) *claim {
	c := &claim{
		conn:   conn,
		raw:    raw,
		addr:   addr,
		name:   name,
		log:    claimLogger(cfg.logger, name, raw),
		events: make(chan event, 2),
		exited: make(chan struct{}),
		core:   session.New(acquire, cfg.lease, try),
		ended:  make(chan struct{}),
	}
	go c.run()
	return c
}

// claimLogger returns the logger of a claim: logger with the lock name and
// server address attached. A logger that discards everything is used as it
// is, which spares every claim the cost of building one.
func claimLogger(logger *slog.Logger, name string, raw net.Conn) *slog.Logger {
	if logger.Handler() == slog.DiscardHandler {
		return logger
	}
	return logger.With("lock", name, "server", raw.RemoteAddr().String())
}

// readBufferSize holds an ACQUIRED (9 bytes) and more: a grant, or a
// promotion and a heartbeat's ack, in one read. Longer frames (an ERROR
// with a long reason) come through it in pieces, which the core reassembles.
const readBufferSize = 64

// releaseWait bounds how long a release waits for the server's confirmation.
const releaseWait = time.Second

func (c *claim) run() {
	defer close(c.exited)
	defer c.raw.Close()
	if !c.apply(c.step(func(s *session.Core) session.Actions { return s.Start(time.Now()) })) {
		return
	}
	var buf [readBufferSize]byte
	for {
		c.mu.Lock()
		if c.letGo {
			acts, graceful := c.core.Release(), c.graceful // Release tells nothing
			c.mu.Unlock()
			c.apply(acts)
			if graceful {
				c.handBack()
			}
			return
		}
		wake := c.core.NextWakeup()
		if wake.IsZero() {
			c.mu.Unlock()
			return
		}
		// Set under mu: Release sets the deadline to now under mu too, so
		// its wake-up can never be overwritten by this one.
		_ = c.conn.SetReadDeadline(wake)
		c.mu.Unlock()

		n, err := c.conn.Read(buf[:])
		now := time.Now()
		if n > 0 {
			data := buf[:n]
			if !c.apply(c.step(func(s *session.Core) session.Actions { return s.Receive(data, now) })) {
				return
			}
		}
		if err == nil {
			continue
		}
		acts := c.step(func(s *session.Core) session.Actions {
			switch {
			case c.letGo:
				return session.Actions{} // handled at the top of the loop
			case errors.Is(err, os.ErrDeadlineExceeded):
				return s.Tick(now)
			}
			return s.ConnectionEnded(err)
		})
		if !c.apply(acts) {
			return
		}
	}
}

// step runs one input through the core under mu. A loss is recorded before
// mu is let go, so a polled Err can never see the core past its decision
// while Done is still open.
func (c *claim) step(input func(*session.Core) session.Actions) session.Actions {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := input(c.core)
	if a.Lost != nil {
		c.endLocked(lostError(c.causeError(a.Lost)))
	}
	return a
}

// apply carries out what the core decided, in its order: tell (one input
// can bring several events, such as WAITING and an ERROR in one read),
// send, close. It reports whether the claim goes on.
func (c *claim) apply(a session.Actions) bool {
	if a.Waiting {
		c.mu.Lock()
		c.queuedAt = time.Now()
		c.mu.Unlock()
		if c.log.Enabled(context.Background(), slog.LevelDebug) {
			c.log.Debug("monolock: waiting")
		}
		c.events <- event{waiting: true}
	}
	if a.Granted {
		c.grant()
	}
	if a.Lost != nil {
		// Already told (step); the log follows.
		c.log.Info("monolock: lock lost", "err", lostError(c.causeError(a.Lost)))
	}
	if a.Failed != nil {
		if a.Failed.Kind == session.CauseBusy {
			// Hand the queue place back before reporting busy: a claim
			// closed without waiting can still be promoted when the holder
			// lets go, and a try that follows would find the lock busy.
			c.handBack()
		}
		c.fail(c.causeError(a.Failed))
	}
	if a.Send != nil {
		if err := c.write(a.Send); err != nil {
			return c.apply(c.step(func(s *session.Core) session.Actions { return s.ConnectionEnded(err) }))
		}
	}
	return !a.Close
}

// write sends one request. It cannot outlive the validity deadline, so a
// stuck socket is caught by the same rule as a silent server.
func (c *claim) write(frame []byte) error {
	c.mu.Lock()
	deadline := c.core.ValidUntil()
	c.mu.Unlock()
	_ = c.conn.SetWriteDeadline(deadline)
	_, err := c.conn.Write(frame)
	return err // causeError says "connection: ..."
}

func (c *claim) grant() {
	c.mu.Lock()
	queued := c.queuedLocked()
	lock := &Lock{name: c.name, token: c.core.Token(), c: c}
	validUntil := c.core.ValidUntil()
	c.mu.Unlock()
	if c.log.Enabled(context.Background(), slog.LevelDebug) {
		c.log.Debug("monolock: acquired", "token", lock.token, "valid_until", validUntil)
	}
	c.events <- event{lock: lock, queued: queued}
}

// queuedLocked is how long the claim has been queued (zero if it never
// was). Caller holds c.mu.
func (c *claim) queuedLocked() time.Duration {
	if c.queuedAt.IsZero() {
		return 0
	}
	return time.Since(c.queuedAt)
}

// fail reports the end of a claim that was never granted, unless Acquire
// has given up on it.
func (c *claim) fail(err error) {
	c.mu.Lock()
	gaveUp, queued := c.letGo, c.queuedLocked()
	c.mu.Unlock()
	if !gaveUp {
		c.events <- event{err: err, queued: queued}
	}
}

// endLocked records the end of the lock's validity, once: the first cause
// wins, and Done closes with it.
func (c *claim) endLocked(err error) {
	if c.err != nil {
		return
	}
	c.err = err
	close(c.ended)
}

// pollLocked is the polled validity check: past the deadline it decides
// the loss (the same decision run would make) and returns Err.
func (c *claim) pollLocked() error {
	if c.err == nil {
		if a, _ := c.core.Poll(time.Now()); a.Lost != nil {
			c.endLocked(lostError(c.causeError(a.Lost)))
		}
	}
	return c.err
}

// letGoNow asks run to close at once: release of a lock (graceful: hand it
// back first) or an acquisition giving up. It wakes run through the read
// deadline.
func (c *claim) letGoNow(graceful bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.letGo {
		return
	}
	c.letGo = true
	c.graceful = graceful && c.core.State() == session.Held
	_ = c.conn.SetReadDeadline(time.Now())
}

// abandon ends a claim Acquire gave up on. The connection is closed right
// here, so the server frees the place in the queue even while run is busy.
func (c *claim) abandon() {
	c.letGoNow(false)
	c.raw.Close()
	<-c.exited
}

// handBack half-closes the connection and waits for the server to close its
// side, which it does once it has let the claim go (a held lock, or a place
// in the queue). Acks of a heartbeat still in flight are read and ignored.
func (c *claim) handBack() {
	cw, ok := c.conn.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	c.mu.Lock()
	wait := min(releaseWait, c.core.Schedule().ClientTimeout())
	c.mu.Unlock()
	_ = c.conn.SetReadDeadline(time.Now().Add(wait))
	var buf [readBufferSize]byte
	for {
		if _, err := c.conn.Read(buf[:]); err != nil {
			return
		}
	}
}

// errClosedByServer is the error of a stream the server closed.
var errClosedByServer = fmt.Errorf("monolock: connection closed by the server: %w", io.EOF)

// causeError turns the core's cause into the package's error values.
func (cl *claim) causeError(c *session.Cause) error {
	switch c.Kind {
	case session.CauseNotMonolock:
		return &notMonolockError{addr: cl.addr, sent: c.Reason}
	case session.CauseTimeout:
		return ErrClientTimeout
	case session.CauseServer:
		return &ServerError{Code: c.Code, Reason: c.Reason}
	case session.CauseProtocol:
		return errorf("%w: %s", ErrProtocol, c.Reason)
	case session.CauseBusy:
		return ErrBusy
	}
	if c.Err == nil || errors.Is(c.Err, io.EOF) {
		return errClosedByServer
	}
	if errors.Is(c.Err, io.ErrUnexpectedEOF) {
		return c.Err
	}
	return errorf("connection: %w", c.Err)
}
