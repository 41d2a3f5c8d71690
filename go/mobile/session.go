package monolock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/monolock/monolock/go/client"
)

// Session is one connection that carries many locks (protocol version 4):
// they share its lease, its heartbeat and its fate. Take locks on it with
// Acquire and TryAcquire (and their shared and semaphore forms); they are
// the same Lock as the Client's (Token, SetLostListener, Unlock), except
// that when the session's connection is lost or goes silent, every lock
// it holds is lost at once. Unlock releases one lock and the session lives
// on; Close releases every lock still held and ends the session. A session
// never reconnects and never re-queues a claim: once it has ended
// (IsOpen false), open another.
//
// The binding also offers a no-argument constructor (new Session() in
// Java, MonolockSession() in Swift); such a Session is closed: every
// claim on it fails with KindIO.
type Session struct {
	inner *client.Session
}

// errNoSession is what a claim on a Session made without OpenSession fails with.
var errNoSession = fmt.Errorf("monolock: a Session made without OpenSession: %w", client.ErrSessionClosed)

// OpenSession opens a session on one server of the client's list, with the
// client's lease (and TLS, and Waiting listener, which hears the session's
// claims). It waits at most timeoutMillis (NoTimeout: one pass over the
// servers, each bounded by the dial timeout).
//
// Errors: KindConnect (no server reached), KindServer (a server that
// refused the session; code 0x13, 0x10 or 0x11 is a server from before
// sessions), KindTimeout.
func (c *Client) OpenSession(timeoutMillis int64) (*Session, error) {
	ctx, stop := deadline(context.Background(), timeoutMillis)
	defer stop()
	s, err := c.inner.Session(ctx)
	if err != nil {
		return nil, classify(err)
	}
	return &Session{inner: s}, nil
}

// Acquire takes the named lock on the session, waiting in the server's
// queue until it is granted, timeoutMillis passes (NoTimeout: no limit),
// or cancel (may be nil) is cancelled; the place in the queue is then
// handed back. Unlike Client.Acquire it never re-queues: the session's end
// fails it (KindIO, or the cause of the end), and so does a refusal
// (KindServer; code 0x05 when the session has MaxStreams claims open).
func (s *Session) Acquire(name string, timeoutMillis int64, cancel *Canceller) (*Lock, error) {
	return s.acquire(name, timeoutMillis, cancel)
}

// AcquireShared is Acquire for a shared claim (see Client.AcquireShared).
func (s *Session) AcquireShared(name string, timeoutMillis int64, cancel *Canceller) (*Lock, error) {
	return s.acquire(name, timeoutMillis, cancel, client.Shared())
}

// AcquireSemaphore is Acquire for one of permits shared holders (see
// Client.AcquireSemaphore).
func (s *Session) AcquireSemaphore(name string, permits int, timeoutMillis int64, cancel *Canceller) (*Lock, error) {
	return s.acquire(name, timeoutMillis, cancel, client.Limit(permits))
}

// Campaign is Client.Campaign on the session: it waits until the session's
// claim is elected leader of name with value (not empty); the Lock is the
// term (Proclaim, Resign), lost with the session.
func (s *Session) Campaign(name, value string, timeoutMillis int64, cancel *Canceller) (*Lock, error) {
	if value == "" {
		return nil, &failure{kind: KindValidation, code: NoCode, err: errors.New("monolock: a leader's value must not be empty (followers reach the leader by it)")}
	}
	return s.acquire(name, timeoutMillis, cancel, client.Value([]byte(value)))
}

func (s *Session) acquire(name string, timeoutMillis int64, cancel *Canceller, opts ...client.AcquireOption) (*Lock, error) {
	if s.inner == nil {
		return nil, classify(errNoSession)
	}
	parent := context.Background()
	if cancel != nil {
		parent = cancel.context()
	}
	ctx, stop := deadline(parent, timeoutMillis)
	defer stop()
	l, err := s.inner.Acquire(ctx, name, opts...)
	if err != nil {
		return nil, classify(err)
	}
	return newLock(l), nil
}

// TryAcquire takes the named lock on the session if it is free, and fails
// with KindBusy at once if not (after handing its place in the queue back).
// The session stays open either way.
func (s *Session) TryAcquire(name string) (*Lock, error) {
	return s.tryAcquire(name)
}

// TryAcquireShared is TryAcquire for a shared claim.
func (s *Session) TryAcquireShared(name string) (*Lock, error) {
	return s.tryAcquire(name, client.Shared())
}

// TryAcquireSemaphore is TryAcquire for one of permits shared holders.
func (s *Session) TryAcquireSemaphore(name string, permits int) (*Lock, error) {
	return s.tryAcquire(name, client.Limit(permits))
}

func (s *Session) tryAcquire(name string, opts ...client.AcquireOption) (*Lock, error) {
	if s.inner == nil {
		return nil, classify(errNoSession)
	}
	l, err := s.inner.TryAcquire(context.Background(), name, opts...)
	if err != nil {
		return nil, classify(err)
	}
	return newLock(l), nil
}

// IsOpen reports whether the session lives: not closed, not ended by a
// loss (then every lock it held is lost).
func (s *Session) IsOpen() bool { return s.inner != nil && s.inner.Err() == nil }

// EndKind returns why the session ended: KindServer, KindTimeout or KindIO
// for a loss (as Lock.LostKind), "closed" after Close, or "" while it is
// open.
func (s *Session) EndKind() string {
	if s.inner == nil {
		return SessionClosed
	}
	err := s.inner.Err()
	switch {
	case err == nil:
		return ""
	case errors.Is(err, client.ErrSessionClosed):
		return SessionClosed
	}
	return classify(err).kind
}

// SessionClosed is Session.EndKind after Close.
const SessionClosed = "closed"

// ValidUntilMillis returns until when (Unix time in milliseconds) the
// server is sure to keep every lock of the session: heartbeats move it
// forward.
func (s *Session) ValidUntilMillis() int64 {
	if s.inner == nil {
		return 0
	}
	return s.inner.ValidUntil().UnixMilli()
}

// MaxStreams is how many claims the server lets the session have at once.
func (s *Session) MaxStreams() int {
	if s.inner == nil {
		return 0
	}
	return s.inner.MaxStreams()
}

// Close ends the session: every lock it still holds is released (none is
// reported lost; an Acquire still waiting on it fails) and the server lets
// them all go at once. It blocks until the server has closed its side, or
// at most about a second. It may be called again.
func (s *Session) Close() {
	if s.inner != nil {
		_ = s.inner.Close() // always nil
	}
}

// deadline bounds parent by timeoutMillis (NoTimeout, or any negative: no
// bound).
func deadline(parent context.Context, timeoutMillis int64) (context.Context, context.CancelFunc) {
	if timeoutMillis < 0 {
		return context.WithCancel(parent)
	}
	return context.WithTimeout(parent, time.Duration(timeoutMillis)*time.Millisecond)
}
