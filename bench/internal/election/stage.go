package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// setupTimeout bounds each step of setting a run up: a campaign, the
// candidate's queueing, the followers' first sight of the leader.
const setupTimeout = 10 * time.Second

// pollEvery is how often a run looks at what its followers have seen; the
// instants themselves are taken by the followers as they see.
const pollEvery = 2 * time.Millisecond

// follower records the instant it first saw each leader value.
type follower struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

func newFollower() *follower { return &follower{seen: map[string]time.Time{}} }

// follow records the values of ch until it closes.
func (f *follower) follow(ch <-chan string) {
	for v := range ch {
		now := time.Now()
		f.mu.Lock()
		if _, ok := f.seen[v]; !ok {
			f.seen[v] = now
		}
		f.mu.Unlock()
	}
}

// seenAt is when f first saw v.
func (f *follower) seenAt(v string) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	at, ok := f.seen[v]
	return at, ok
}

// lastSeen waits until every follower has seen v, or until deadline, and
// returns the latest of their instants and how many saw it.
func lastSeen(ctx context.Context, fs []*follower, v string, deadline time.Time) (last time.Time, n int) {
	for {
		last, n = time.Time{}, 0
		for _, f := range fs {
			if at, ok := f.seenAt(v); ok {
				n++
				if at.After(last) {
					last = at
				}
			}
		}
		if n == len(fs) || !time.Now().Before(deadline) || ctx.Err() != nil {
			return last, n
		}
		time.Sleep(pollEvery)
	}
}

// campaignResult is a queued candidate's election.
type campaignResult struct {
	term Term
	at   time.Time
	err  error
}

// stage is one run's election set up: leader A elected with value "a"
// through its own address, followers that have all seen it, and candidate
// B waiting behind it on the server's direct address.
type stage struct {
	a         Participant
	aTerm     Term
	b         Participant
	bElected  chan campaignResult // one result
	followers []*follower
	parts     []Participant // every participant, for Close
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

// A's and B's campaign values.
const (
	leaderValueA   = "a"
	candidateValue = "b"
)

// setUp stages rec's election on name: A joins through aAddr, then
// observers followers and, with candidate, B join directly.
func setUp(ctx context.Context, rec Recipe, name, aAddr string, observers int, candidate bool) (s *stage, err error) {
	runCtx, cancel := context.WithCancel(ctx)
	s = &stage{cancel: cancel}
	defer func() {
		if err != nil {
			s.close()
			s = nil
		}
	}()
	sctx, done := context.WithTimeout(ctx, setupTimeout)
	defer done()
	if s.a, err = s.join(sctx, rec, aAddr); err != nil {
		return s, fmt.Errorf("leader: %w", err)
	}
	if s.aTerm, err = s.a.Campaign(sctx, name, leaderValueA); err != nil {
		return s, fmt.Errorf("leader's campaign: %w", err)
	}
	for range observers {
		if err := s.observe(sctx, runCtx, rec, name); err != nil {
			return s, fmt.Errorf("follower: %w", err)
		}
	}
	if candidate {
		if err := s.queue(sctx, runCtx, rec, name); err != nil {
			return s, err
		}
	}
	if _, n := lastSeen(sctx, s.followers, leaderValueA, time.Now().Add(setupTimeout)); n < observers {
		return s, fmt.Errorf("%d of %d followers saw the first leader", n, observers)
	}
	return s, nil
}

func (s *stage) join(ctx context.Context, rec Recipe, addr string) (Participant, error) {
	p, err := rec.Join(ctx, addr)
	if err == nil {
		s.parts = append(s.parts, p)
	}
	return p, err
}

// observe adds a follower that watches name until runCtx ends.
func (s *stage) observe(ctx, runCtx context.Context, rec Recipe, name string) error {
	p, err := s.join(ctx, rec, rec.Upstream)
	if err != nil {
		return err
	}
	ch, err := p.Observe(runCtx, name)
	if err != nil {
		return err
	}
	f := newFollower()
	s.followers = append(s.followers, f)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f.follow(ch)
	}()
	return nil
}

// queue starts B's campaign and returns once B waits behind A.
func (s *stage) queue(ctx, runCtx context.Context, rec Recipe, name string) error {
	var err error
	if s.b, err = s.join(ctx, rec, rec.Upstream); err != nil {
		return fmt.Errorf("candidate: %w", err)
	}
	s.bElected = make(chan campaignResult, 1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t, err := s.b.Campaign(runCtx, name, candidateValue)
		s.bElected <- campaignResult{term: t, at: time.Now(), err: err}
	}()
	for {
		n, err := s.b.Waiting(ctx, name)
		if err == nil && n >= 1 {
			return nil
		}
		select {
		case r := <-s.bElected:
			return fmt.Errorf("candidate elected while the leader led (%v)", r.err)
		case <-ctx.Done():
			return errors.Join(errors.New("candidate never queued"), err, ctx.Err())
		case <-time.After(pollEvery):
		}
	}
}

// close ends the run's participants, all at once so that a slow close
// (a leader cut off) costs its bound once. The campaign and the followers
// end with the run's context first, so that a term B won meanwhile is
// known to its participant and given up.
func (s *stage) close() {
	s.cancel()
	s.wg.Wait()
	var wg sync.WaitGroup
	for _, p := range s.parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Close()
		}()
	}
	wg.Wait()
}
