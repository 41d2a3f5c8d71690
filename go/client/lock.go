package client

import (
	"context"
	"time"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// Lock is a held lock. It stays held until Release or until it is lost;
// watch Done, and check Err before acting on the lock.
type Lock struct {
	name  string
	token uint64
	c     *claim
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
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	return l.c.core.ValidUntil()
}

// LeaseEnd returns the earliest time at which the server can grant the
// lock to anyone else on its own: the send of the last acknowledged
// message plus the full lease (ValidUntil is 0.8 x lease after that send).
// Until then a lost lock's connection stays open unless released. Only an
// administrator's kick hands the lock on sooner.
func (l *Lock) LeaseEnd() time.Time {
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	return l.c.core.LeaseEnd()
}

// Done returns a channel that is closed when the lock is no longer valid:
// the moment the loss is decided (ValidUntil passed without a newer
// acknowledgement, or the server ended the session), or Release. Err tells
// which. Done closes before the connection does: a lock lost by timeout
// keeps its connection open until Release or until a full lease after the
// last acknowledged send, so the server cannot grant the lock to anyone
// else before the holder has been told.
func (l *Lock) Done() <-chan struct{} { return l.c.ended }

// Err returns nil while the lock is held, ErrReleased after Release, and an
// error wrapping ErrLockLost and its cause (a *ServerError,
// ErrClientTimeout, or the connection's error) after loss. Once ValidUntil
// has passed Err reports the loss, and Done is closed by that same check.
func (l *Lock) Err() error {
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	return l.c.pollLocked()
}

// Release gives the lock up by closing its connection; the server hands it
// to the next waiter at once. For a valid lock it returns once the server
// has closed its side too (so the lock is free when Release returns), or
// after at most a second without that confirmation; after a loss it closes
// at once. It is safe to call more than once and always returns nil.
func (l *Lock) Release() error {
	c := l.c
	c.mu.Lock()
	c.pollLocked()
	c.endLocked(ErrReleased)
	c.mu.Unlock()
	c.letGoNow(true)
	<-c.exited
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
// keeps its token. It returns once the server has acknowledged it (its
// reply also refreshes the lease, as a heartbeat's does), or with the
// lock's error if the lock ends first, or ctx's. A lock claimed without a
// value cannot proclaim (its server may not know values): that is an error
// at once.
func (l *Lock) Proclaim(ctx context.Context, value []byte) error {
	c := l.c
	if !c.valued {
		return errorf("monolock: lock %q was claimed without a value (use the Value option to proclaim)", l.name)
	}
	frame, err := protocol.AppendProclaim(nil, value)
	if err != nil {
		return errorf("%w: %d bytes, at most %d", err, len(value), protocol.MaxValueLen)
	}
	c.mu.Lock()
	if err := c.pollLocked(); err != nil {
		c.mu.Unlock()
		return err
	}
	seq := c.core.Proclaim(frame)
	// Wake the serving goroutine: it sends the PROCLAIM (all writes are
	// its own), at once or right after the reply it is waiting for.
	_ = c.conn.SetReadDeadline(time.Now())
	c.mu.Unlock()
	if seq == 0 {
		return l.Err()
	}
	for {
		c.mu.Lock()
		done := c.core.Proclaimed() >= seq
		c.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-c.proclaimed:
		case <-l.Done():
			return l.Err()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
