package client

import (
	"context"
	"errors"
	"time"

	"github.com/monolock/monolock/go/client/internal/session"
	"github.com/monolock/monolock/go/client/internal/streams"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// Acquire takes the named lock on the session, waiting in the server's
// queue until it is granted or ctx is done (the place in the queue is then
// handed back). It takes the options of Client.Acquire and returns the
// same *Lock, whose lease and fate are the session's. Unlike
// Client.Acquire it never retries: a refusal (a *ServerError, such as 0x05
// when the session has MaxStreams claims open) or the session's end is
// returned at once.
func (s *Session) Acquire(ctx context.Context, name string, opts ...AcquireOption) (*Lock, error) {
	return s.acquire(ctx, name, false, opts)
}

// TryAcquire takes the named lock if it is free and returns an error
// wrapping ErrBusy at once if not, as Client.TryAcquire does: before it
// returns it hands its place in the queue back and waits for the server to
// confirm, so a release cannot promote the abandoned claim.
func (s *Session) TryAcquire(ctx context.Context, name string, opts ...AcquireOption) (*Lock, error) {
	return s.acquire(ctx, name, true, opts)
}

func (s *Session) acquire(ctx context.Context, name string, try bool, opts []AcquireOption) (*Lock, error) {
	o, err := applyAcquireOptions(opts)
	if err != nil {
		return nil, err
	}
	acquire, err := o.frame(name, s.leaseMS)
	if errors.Is(err, protocol.ErrNameTooLong) {
		return nil, nameTooLongError(name)
	}
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, interrupted(name, ctx, nil)
	}
	cl := &streamClaim{s: s, name: name, opts: o, news: make(chan streams.Event, 3),
		endedCh: make(chan struct{}), releasedCh: make(chan struct{}), proclaimed: make(chan struct{}, 1)}
	if err := s.open(cl, acquire, try); err != nil {
		return nil, err
	}
	for {
		select {
		case ev := <-cl.news:
			switch ev.Kind {
			case streams.Waiting:
				if s.cfg.onWaiting != nil {
					s.cfg.onWaiting(name)
				}
			case streams.Granted:
				return cl.lock, nil
			case streams.Failed:
				if ev.Cause.Kind == session.CauseBusy {
					return nil, &busyError{name: name, shared: o.shared, limit: o.limit}
				}
				return nil, causeErr(ev.Cause, s.addr, s.leaseMS)
			default: // Released: Close came first
				return nil, errorf("acquire %q: %w", name, ErrSessionClosed)
			}
		case <-ctx.Done():
			cl.letGo(false)
			return nil, interrupted(name, ctx, nil)
		}
	}
}

// open sends the claim's OPEN, in the order of its stream id.
func (s *Session) open(cl *streamClaim, acquire []byte, try bool) error {
	s.mu.Lock()
	s.pollLocked()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return errorf("session: %w", err)
	}
	id, frame, err := s.core.OpenClaim(acquire, try)
	if err != nil {
		s.mu.Unlock()
		return errorf("session: %w", err)
	}
	cl.id = id
	s.streams[id] = cl
	s.enqueueLocked(frame)
	s.mu.Unlock()
	return nil
}

// streamClaim is one claim stream of a session: what a Lock of the
// session stands on. Its fields after s and the constants are s.mu's.
type streamClaim struct {
	s    *Session
	id   uint32
	name string
	opts claimOptions

	news       chan streams.Event // to the waiting Acquire: waiting, granted, failed, released
	lock       *Lock
	endedCh    chan struct{} // Lock.Done
	lockErr    error
	releasedCh chan struct{} // closed when the stream is over for the client
	over       bool
	// frozen validity: set when the lock ends, so it stays where it was.
	frozenValid, frozenLease time.Time
	proclaimedSeq            uint64
	proclaimed               chan struct{} // wakes Proclaim (buffered, 1)
}

// tell takes one event of the stream and reports whether the stream is
// over. Caller holds s.mu; nothing here blocks.
func (cl *streamClaim) tell(ev streams.Event, s *Session) (over bool) {
	switch ev.Kind {
	case streams.Waiting:
		cl.notify(ev)
		return false
	case streams.Granted:
		cl.lock = &Lock{name: cl.name, token: ev.Token, h: cl}
		cl.notify(ev)
		return false
	case streams.Proclaimed:
		cl.proclaimedSeq = ev.Seq
		select {
		case cl.proclaimed <- struct{}{}:
		default:
		}
		return false
	case streams.Failed:
		cl.notify(ev)
	case streams.Lost:
		err := lostError(causeErr(ev.Cause, s.addr, s.leaseMS))
		s.log.Info("monolock: lock lost", "lock", cl.name, "err", err)
		cl.endLocked(err)
	case streams.Released:
		if cl.lock == nil {
			cl.notify(ev)
		}
		cl.endLocked(ErrReleased)
	}
	cl.finishLocked()
	return true
}

// notify hands an event to the waiting Acquire; the buffer holds every
// event a claim can have before its outcome.
func (cl *streamClaim) notify(ev streams.Event) {
	select {
	case cl.news <- ev:
	default:
	}
}

// endLocked ends the lock's validity, once: the first cause wins.
func (cl *streamClaim) endLocked(err error) {
	if cl.lockErr != nil {
		return
	}
	cl.lockErr = err
	cl.frozenValid, cl.frozenLease = cl.s.core.ValidUntil(), cl.s.core.LeaseEnd()
	close(cl.endedCh)
}

func (cl *streamClaim) finishLocked() {
	if !cl.over {
		cl.over = true
		close(cl.releasedCh)
	}
}

func (cl *streamClaim) validUntil() time.Time {
	cl.s.mu.Lock()
	defer cl.s.mu.Unlock()
	if cl.lockErr != nil {
		return cl.frozenValid
	}
	return cl.s.core.ValidUntil()
}

func (cl *streamClaim) leaseEnd() time.Time {
	cl.s.mu.Lock()
	defer cl.s.mu.Unlock()
	if cl.lockErr != nil {
		return cl.frozenLease
	}
	return cl.s.core.LeaseEnd()
}

func (cl *streamClaim) ended() <-chan struct{} { return cl.endedCh }

func (cl *streamClaim) err() error {
	cl.s.mu.Lock()
	defer cl.s.mu.Unlock()
	return cl.errLocked()
}

func (cl *streamClaim) errLocked() error {
	if cl.lockErr == nil {
		cl.s.pollLocked()
	}
	return cl.lockErr
}

func (cl *streamClaim) release() { cl.letGo(true) }

// letGo sends the stream's RELEASE; from then on the claim is released
// for the client. wait: return once the server has answered RELEASED (the
// lock is free then), the session has ended, or the bound has passed.
func (cl *streamClaim) letGo(wait bool) {
	s := cl.s
	s.mu.Lock()
	cl.errLocked()
	cl.endLocked(ErrReleased)
	frame, done := s.core.Release(cl.id)
	if done && s.streams[cl.id] == streamOwner(cl) {
		delete(s.streams, cl.id)
		cl.finishLocked()
	}
	bound := min(releaseWait, s.core.Schedule().ClientTimeout())
	s.enqueueLocked(frame)
	s.mu.Unlock()
	if done || !wait {
		return
	}
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-cl.releasedCh:
	case <-s.done:
	case <-t.C:
	}
}

func (cl *streamClaim) proclaim(ctx context.Context, name string, value []byte) error {
	frame, err := protocol.AppendProclaim(nil, value)
	if err != nil {
		return errorf("%w: %d bytes, at most %d", err, len(value), protocol.MaxValueLen)
	}
	s := cl.s
	s.mu.Lock()
	if err := cl.errLocked(); err != nil {
		s.mu.Unlock()
		return err
	}
	seq, on := s.core.Proclaim(cl.id, frame)
	s.enqueueLocked(on)
	s.mu.Unlock()
	if seq == 0 {
		return cl.err()
	}
	for {
		s.mu.Lock()
		done := cl.proclaimedSeq >= seq
		s.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-cl.proclaimed:
		case <-cl.endedCh:
			return cl.err()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
