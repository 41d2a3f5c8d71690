package client

import (
	"context"
	"errors"
	"sync"
)

// Pool spreads claims over a few sessions of one Client, for callers that
// take many short locks: each claim goes to the session with the fewest
// claims open, up to size sessions, each within its server's MaxStreams.
// A session that has ended is dropped, and the next claim that needs room
// opens a new one. It is opt-in: Client.Acquire gives every lock a
// connection of its own.
//
// The trade-off: claims on one session share its fate. When a session's
// connection is lost (or its heartbeat goes unanswered for 0.8 x lease),
// every lock it holds is lost at once, where locks on connections of their
// own would be lost one by one. A Pool never retries a claim either: an
// Acquire that fails with the session's end returns that error, and the
// next Acquire gets a fresh session.
//
// A session that has used every stream id (ids only grow; 2^32 - 1 of
// them) takes no new claim: it leaves the pool's count at once, so a new
// session can open, and is closed once its last claim has ended.
//
// A Pool is safe for concurrent use.
type Pool struct {
	c    *Client
	size int

	mu       sync.Mutex
	sessions []*Session
	retiring []*Session    // every id used: closed once their claims end
	dialing  int           // sessions being opened
	dialed   chan struct{} // closed (and replaced) when a dial ends
	closed   bool
}

// NewPool returns a pool of at most size sessions of c (size 1 or more).
// It opens no session until the first claim.
func NewPool(c *Client, size int) (*Pool, error) {
	if size < 1 {
		return nil, errorf("a pool needs at least 1 session, got %d", size)
	}
	return &Pool{c: c, size: size, dialed: make(chan struct{})}, nil
}

// Acquire is Session.Acquire on a session of the pool with room.
func (p *Pool) Acquire(ctx context.Context, name string, opts ...AcquireOption) (*Lock, error) {
	s, err := p.session(ctx)
	if err != nil {
		return nil, err
	}
	return s.Acquire(ctx, name, opts...)
}

// TryAcquire is Session.TryAcquire on a session of the pool with room.
func (p *Pool) TryAcquire(ctx context.Context, name string, opts ...AcquireOption) (*Lock, error) {
	s, err := p.session(ctx)
	if err != nil {
		return nil, err
	}
	return s.TryAcquire(ctx, name, opts...)
}

// Close closes every session of the pool (their locks are released) and
// makes later claims fail with ErrSessionClosed.
func (p *Pool) Close() error {
	p.mu.Lock()
	sessions := append(p.sessions, p.retiring...)
	p.sessions, p.retiring, p.closed = nil, nil, true
	p.mu.Unlock()
	for _, s := range sessions {
		s.Close()
	}
	return nil
}

// errPoolFull is a claim for which every session of a full pool has
// MaxStreams claims open.
var errPoolFull = errors.New("every session of the pool has as many claims open as its server allows")

// session returns the live session with the fewest claims open, opening
// a new one while the pool has fewer than size and every live one is in
// use.
func (p *Pool) session(ctx context.Context) (*Session, error) {
	for {
		s, wait, err := p.pick(ctx)
		if wait == nil {
			return s, err
		}
		// Every session is being opened: wait for one.
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, errorf("pool: %w", ctx.Err())
		}
	}
}

// pick is one try of session: the session, or a channel to wait on when
// the only sessions to come are being opened by other claims.
func (p *Pool) pick(ctx context.Context) (*Session, <-chan struct{}, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, nil, errorf("pool: %w", ErrSessionClosed)
	}
	// Sorted out in place: a pick allocates nothing. A retiring session
	// never comes back, so the retiring are sorted first.
	retiring := p.retiring[:0]
	for _, s := range p.retiring {
		if _, keep := sortOut(s); keep {
			retiring = append(retiring, s)
		}
	}
	var best *Session
	bestOpen := 0
	live := p.sessions[:0]
	for _, s := range p.sessions {
		st, keep := sortOut(s)
		switch {
		case !keep:
			continue
		case st.idsLeft == 0:
			retiring = append(retiring, s)
			continue
		}
		live = append(live, s)
		if st.open < st.max && (best == nil || st.open < bestOpen) {
			best, bestOpen = s, st.open
		}
	}
	clear(p.sessions[len(live):]) // no stale pointer keeps an ended session
	p.sessions, p.retiring = live, retiring
	grow := len(p.sessions)+p.dialing < p.size && (best == nil || bestOpen > 0)
	if !grow {
		defer p.mu.Unlock()
		switch {
		case best != nil:
			return best, nil, nil
		case p.dialing > 0:
			return nil, p.dialed, nil
		}
		return nil, nil, errorf("pool: %w", errPoolFull)
	}
	p.dialing++
	p.mu.Unlock()

	s, err := p.c.Session(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dialing--
	close(p.dialed)
	p.dialed = make(chan struct{})
	if err != nil {
		if best != nil {
			return best, nil, nil // a session with room is still there
		}
		return nil, nil, err
	}
	if p.closed {
		go s.Close()
		return nil, nil, errorf("pool: %w", ErrSessionClosed)
	}
	p.sessions = append(p.sessions, s)
	return s, nil, nil
}

// poolState is what a pool's pick needs to know of a session.
type poolState struct {
	ended     bool
	open, max int
	idsLeft   uint32
}

func (s *Session) poolState() poolState {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pollLocked()
	return poolState{ended: s.err != nil, open: s.core.Open(), max: int(s.core.MaxStreams()), idsLeft: s.core.IDsLeft()}
}

// sortOut reads what a pick needs of s and reports whether the pool keeps
// it: an ended session's claims ended with it, and a spent one (no ids
// left) with no claim open is closed here, to make room for a new one.
func sortOut(s *Session) (st poolState, keep bool) {
	st = s.poolState()
	if !st.ended && st.idsLeft == 0 && st.open == 0 {
		go s.Close()
		return st, false
	}
	return st, !st.ended
}
