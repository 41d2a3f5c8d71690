package client

import (
	"context"
	"sync"
	"time"
)

// Lock is a held lock. It stays held until Release or until it is lost;
// watch Done, and check Err before acting on the lock.
type Lock struct {
	name  string
	token uint64
	sess  *session

	mu         sync.Mutex
	validUntil time.Time
	err        error
	lost       bool // Release found the lock already lost
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
func (l *Lock) ValidUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil
}

// Done returns a channel that is closed when the lock ends: lost, or
// released. By then the connection is closed. Err tells which.
func (l *Lock) Done() <-chan struct{} { return l.sess.done }

// Err returns nil while the lock is held, ErrReleased after Release, and an
// error wrapping ErrLockLost and its cause (a *ServerError,
// ErrClientTimeout, or the connection's error) after loss. Once ValidUntil
// has passed Err reports the loss, even if Done has not closed yet.
func (l *Lock) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.checkExpiryLocked()
	return l.err
}

// Release gives the lock up by closing its connection; the server hands it
// to the next waiter at once. It returns once the server has closed its side
// too (so the lock is free when Release returns), or after at most a second
// without that confirmation, with the connection closed either way. It is
// safe to call more than once, also after loss, and always returns nil.
func (l *Lock) Release() error {
	l.mu.Lock()
	if l.err == nil {
		l.err = ErrReleased
	} else if l.err != ErrReleased {
		l.lost = true
	}
	l.mu.Unlock()
	l.sess.release()
	<-l.sess.done
	return nil
}

// lostBeforeRelease reports whether the lock had already been lost when
// Release was called: then there is nothing to hand back.
func (l *Lock) lostBeforeRelease() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
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

// setErr records the end of the lock unless it has already ended.
func (l *Lock) setErr(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.err = err
	}
}

// extend moves the validity deadline on an acknowledgement, unless the old
// deadline has already passed: a late ack cannot revive a lock.
func (l *Lock) extend(until time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.checkExpiryLocked() {
		return false
	}
	l.validUntil = until
	return true
}

// expired reports whether the lock has ended by timeout (or otherwise).
func (l *Lock) expired() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.checkExpiryLocked()
}

// checkExpiryLocked latches the loss once the deadline has passed and
// reports whether the lock has ended.
func (l *Lock) checkExpiryLocked() bool {
	if l.err == nil && !time.Now().Before(l.validUntil) {
		l.err = lostError(ErrClientTimeout)
	}
	return l.err != nil
}
