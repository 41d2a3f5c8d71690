package client

import (
	"context"
	"time"
)

// Lock is a held lock. It stays held until Release or until it is lost;
// watch Done, and check Err before acting on the lock. A Lock taken by
// Client.Acquire has a connection of its own; one taken by
// Session.Acquire shares its session's connection and lease, with the
// same methods and meaning.
type Lock struct {
	name  string
	token uint64
	h     holding
}

// holding is what a Lock stands on: a connection of its own (*claim) or a
// stream of a session (*streamClaim).
type holding interface {
	validUntil() time.Time
	leaseEnd() time.Time
	ended() <-chan struct{}
	err() error
	release()
	proclaim(ctx context.Context, name string, value []byte) error
}

// Name returns the lock's name.
func (l *Lock) Name() string { return l.name }

// Token returns the fencing token of the grant. Tokens only grow: pass it to
// the resource the lock protects, which can then refuse any request carrying
// a smaller token than one it has seen.
func (l *Lock) Token() uint64 { return l.token }

// ValidUntil returns the time until which the server is sure to keep the
// lock: the send of the last acknowledged message plus 0.8 x lease, on the
// monotonic clock. Heartbeats move it forward; when it passes the lock is
// lost, and after loss or release it stays where it was.
func (l *Lock) ValidUntil() time.Time { return l.h.validUntil() }

// LeaseEnd returns the earliest time at which the server can grant the
// lock to anyone else on its own: the send of the last acknowledged
// message plus the full lease (ValidUntil is 0.8 x lease after that send).
// Until then a lost lock's connection stays open unless released. Only an
// administrator's kick hands the lock on sooner.
func (l *Lock) LeaseEnd() time.Time { return l.h.leaseEnd() }

// Done returns a channel that is closed when the lock is no longer valid:
// the moment the loss is decided (ValidUntil passed without a newer
// acknowledgement, or the server ended the session), or Release. Err tells
// which. Done closes before the connection does: a lock lost by timeout
// keeps its connection open until Release or until a full lease after the
// last acknowledged send, so the server cannot grant the lock to anyone
// else before the holder has been told.
func (l *Lock) Done() <-chan struct{} { return l.h.ended() }

// Err returns nil while the lock is held, ErrReleased after Release, and an
// error wrapping ErrLockLost and its cause (a *ServerError,
// ErrClientTimeout, or the connection's error) after loss. Once ValidUntil
// has passed Err reports the loss, and Done is closed by that same check.
func (l *Lock) Err() error { return l.h.err() }

// Release gives the lock up; the server hands it to the next waiter at
// once. For a valid lock it returns once the server has confirmed (so the
// lock is free when Release returns), or after at most a second (or the
// client timeout, if shorter) without that confirmation; after a loss it
// returns at once. A lock of its own connection is given up by closing
// it; a lock of a session by a RELEASE of its stream, and the session
// lives on. It is safe to call more than once and always returns nil.
func (l *Lock) Release() error {
	l.h.release()
	return nil
}

// Context returns a copy of parent that is cancelled when the lock ends; its
// context.Cause is then Err. Call cancel when done with it.
func (l *Lock) Context(parent context.Context) (ctx context.Context, cancel context.CancelFunc) {
	ctx, cancelCause := context.WithCancelCause(parent)
	go func() {
		select {
		case <-l.Done():
			cancelCause(l.Err())
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancelCause(context.Canceled) }
}

// Proclaim replaces the value the lock was claimed with (see Value) while
// it is held: watchers and the admin API see the new one, and the lock
// keeps its token. It returns once the server has acknowledged it, or
// with the lock's error if the lock ends first, or ctx's. On a connection
// of its own the reply also refreshes the lease, as a heartbeat's does; in
// a session only the session's heartbeats move ValidUntil. A lock of its own
// connection claimed without a value cannot proclaim (its server may not
// know values): that is an error at once. A lock of a session can always
// proclaim (a server that speaks sessions knows values).
func (l *Lock) Proclaim(ctx context.Context, value []byte) error {
	return l.h.proclaim(ctx, l.name, value)
}
