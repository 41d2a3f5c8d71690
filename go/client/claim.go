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
	"github.com/monolock/monolock/go/internal/spec"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// claim is one connection: one claim on one lock. It has one reader at a
// time, and the read deadline is its timer. Until the outcome (a grant or
// a failure), the goroutine in Acquire serves it, so an uncontended
// acquisition costs no goroutine and no hand-off; a granted claim is then
// served by a goroutine of its own until it ends. Every protocol decision is
// made by the pure session core; serve only does the I/O the core asks for.
//
// The core sits behind mu because the application polls it too: Lock.Err
// past the deadline decides the loss itself, once, and whichever side sees
// the deadline first decides for both.
type claim struct {
	conn      net.Conn // TLS or TCP
	raw       net.Conn // the TCP connection, closed to end the claim
	addr      string   // the server as configured, for messages
	name      string
	leaseMS   uint32 // for the client timeout's message
	log       *slog.Logger
	onWaiting func(name string) // the client's hook, or nil
	exited    chan struct{}     // closed when serving has ended and the connection is closed

	// The outcome, set by the serving goroutine before it stops at it.
	lock    *Lock
	failure error
	queued  time.Duration // how long the claim had been queued

	// wmu orders writes with Release's half-close, so that no request
	// is written after it (and none fails on it).
	wmu        sync.Mutex
	halfClosed bool

	mu       sync.Mutex
	core     *session.Core
	endedCh  chan struct{} // Lock.Done: closed when the lock is no longer valid
	lockErr  error         // Lock.Err once ended: ErrReleased or the loss
	letGo    bool          // the application released or gave up: close at once
	graceful bool          // letGo on a valid lock: hand it back and wait for the server
	queuedAt time.Time

	// valued: the ACQUIRE was version 3, so PROCLAIM may follow;
	// proclaimed wakes Lock.Proclaim after every read (buffered, 1).
	valued     bool
	proclaimed chan struct{}
}

func newClaim(conn, raw net.Conn, addr, name string, acquire []byte, try bool, cfg *config) *claim {
	return &claim{
		conn:      conn,
		raw:       raw,
		addr:      addr,
		name:      name,
		leaseMS:   cfg.leaseMS,
		log:       claimLogger(cfg.logger, name, raw),
		onWaiting: cfg.onWaiting,
		exited:    make(chan struct{}),
		core:      session.New(acquire, cfg.lease, try),
		endedCh:   make(chan struct{}),

		valued:     len(acquire) > 1 && acquire[1] == protocol.VersionValue,
		proclaimed: make(chan struct{}, 1),
	}
}

// acquire serves the claim on the calling goroutine until its outcome, or
// until ctx ends (err is then ctx's). A granted claim goes on in a
// goroutine of its own.
func (c *claim) acquire(ctx context.Context) (*Lock, time.Duration, error) {
	stop := context.AfterFunc(ctx, func() { c.letGoNow(false) })
	open := c.serve(true) // stopped at the outcome with the connection open
	if !stop() {
		// ctx ended while the claim was served: it gives up, whatever
		// the server said meanwhile.
		c.letGoNow(false)
		if open {
			c.serve(false)
		}
		<-c.exited
		return nil, 0, ctx.Err()
	}
	if c.lock != nil {
		// Granted; possibly lost in the same read, which Done and Err
		// already tell.
		if open {
			go c.serve(false)
		}
		return c.lock, c.queued, nil
	}
	if open {
		c.serve(false) // not reached: a failure always closes
	}
	if c.failure == nil {
		return nil, c.queued, errorf("%w: the claim ended without a grant or an error", ErrProtocol)
	}
	return nil, c.queued, c.failure
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

// readBufferSize holds the longest frame a server sends, an ERROR with a
// reason of 255 bytes, so that an ERROR that arrived whole is told at
// once with its whole reason: the core tells an ERROR as soon as its code
// is in (the availability rule), with the reason bytes the same read
// brought, and never waits for more. (64 bytes cut every longer reason at
// 61.) A grant, or a promotion and a heartbeat's ack, fit too.
const readBufferSize = 3 + spec.MaxReasonLen

// releaseWait bounds how long a release waits for the server's confirmation.
const releaseWait = spec.ReleaseMaxWaitMS * time.Millisecond

// serve reads and acts until the claim ends, or, with untilOutcome, until
// it has been granted or has failed (decided reports that; the connection
// then stays open, for serve to be called again). Only one goroutine serves
// a claim at a time: the connection has one reader.
func (c *claim) serve(untilOutcome bool) (decided bool) {
	if c.core.State() == session.Connecting {
		if !c.apply(c.step(func(s *session.Core) session.Actions { return s.Start(time.Now()) })) {
			c.exit()
			return false
		}
	}
	var buf [readBufferSize]byte
	for {
		if untilOutcome && (c.lock != nil || c.failure != nil) {
			return true
		}
		c.mu.Lock()
		if c.letGo {
			acts, graceful := c.core.Release(), c.graceful // Release tells nothing
			c.mu.Unlock()
			c.apply(acts)
			if graceful {
				c.handBack()
			}
			c.exit()
			return false
		}
		wake := c.core.NextWakeup()
		if wake.IsZero() {
			c.mu.Unlock()
			c.exit()
			return false
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
				c.exit()
				return false
			}
			select {
			case c.proclaimed <- struct{}{}: // a reply may have acknowledged a PROCLAIM
			default:
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
			c.exit()
			return false
		}
	}
}

// exit closes the connection and says so.
func (c *claim) exit() {
	c.raw.Close()
	close(c.exited)
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
		if c.onWaiting != nil {
			c.onWaiting(c.name)
		}
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
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.halfClosed {
		return nil // released: the server is letting the claim go
	}
	_ = c.conn.SetWriteDeadline(deadline)
	_, err := c.conn.Write(frame)
	return err // causeError says "connection: ..."
}

func (c *claim) grant() {
	c.mu.Lock()
	queued := c.queuedLocked()
	lock := &Lock{name: c.name, token: c.core.Token(), h: c}
	validUntil := c.core.ValidUntil()
	c.mu.Unlock()
	if c.log.Enabled(context.Background(), slog.LevelDebug) {
		c.log.Debug("monolock: acquired", "token", lock.token, "valid_until", validUntil)
	}
	c.lock, c.queued = lock, queued
}

// queuedLocked is how long the claim has been queued (zero if it never
// was). Caller holds c.mu.
func (c *claim) queuedLocked() time.Duration {
	if c.queuedAt.IsZero() {
		return 0
	}
	return time.Since(c.queuedAt)
}

// fail records the end of a claim that was never granted.
func (c *claim) fail(err error) {
	c.mu.Lock()
	c.queued = c.queuedLocked()
	c.mu.Unlock()
	c.failure = err
}

// endLocked records the end of the lock's validity, once: the first cause
// wins, and Done closes with it.
func (c *claim) endLocked(err error) {
	if c.lockErr != nil {
		return
	}
	c.lockErr = err
	close(c.endedCh)
}

// pollLocked is the polled validity check: past the deadline it decides
// the loss (the same decision run would make) and returns Err.
func (c *claim) pollLocked() error {
	if c.lockErr == nil {
		if a, _ := c.core.Poll(time.Now()); a.Lost != nil {
			c.endLocked(lostError(c.causeError(a.Lost)))
		}
	}
	return c.lockErr
}

// letGoNow asks serve to close at once: release of a lock (graceful: hand
// it back first) or an acquisition giving up. It wakes serve through the
// read deadline.
func (c *claim) letGoNow(graceful bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.letGo {
		return
	}
	c.letGo = true
	c.graceful = graceful && c.core.State() == session.Held
	if c.graceful {
		if closed, _ := c.halfClose(); closed {
			// Handed back right here: serve wakes when the server has
			// closed its side (or at the bound), not once more before.
			_ = c.conn.SetReadDeadline(time.Now().Add(c.releaseWaitLocked()))
			return
		}
	}
	_ = c.conn.SetReadDeadline(time.Now())
}

// releaseWaitLocked bounds the wait for the server's close after a
// release. Caller holds c.mu.
func (c *claim) releaseWaitLocked() time.Duration {
	return min(releaseWait, c.core.Schedule().ClientTimeout())
}

// halfClose sends the end of the stream, once. closed says whether it has
// been sent (false if that failed); justNow whether this call sent it.
func (c *claim) halfClose() (closed, justNow bool) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.halfClosed {
		return true, false
	}
	cw, ok := c.conn.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return false, false
	}
	c.halfClosed = true
	return true, true
}

// handBack half-closes the connection (unless Release did) and waits for
// the server to close its side, which it does once it has let the claim go
// (a held lock, or a place in the queue). Acks of a heartbeat still in
// flight are read and ignored.
func (c *claim) handBack() {
	closed, justNow := c.halfClose()
	if !closed {
		return
	}
	if justNow { // else Release did, and set the bound
		c.mu.Lock()
		wait := c.releaseWaitLocked()
		c.mu.Unlock()
		_ = c.conn.SetReadDeadline(time.Now().Add(wait))
	}
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
func (cl *claim) causeError(c *session.Cause) error { return causeErr(c, cl.addr, cl.leaseMS) }

// causeErr turns a core's cause into the package's error values: addr is
// the server as configured, leaseMS the lease (for the timeout's message).
func causeErr(c *session.Cause, addr string, leaseMS uint32) error {
	switch c.Kind {
	case session.CauseNotMonolock:
		return &notMonolockError{addr: addr, sent: c.Reason}
	case session.CauseTimeout:
		return &clientTimeoutError{leaseMS: leaseMS}
	case session.CauseServer:
		if !c.Coded {
			return ErrServerEnded
		}
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
