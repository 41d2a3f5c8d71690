package client

import (
	"bytes"
	"context"
	"time"
)

// Leader election is a lock with a value, and a watch of it. A term is a
// grant: its token fences the leader's writes, its loss is told before the
// server could elect anyone else (0.2 x lease before), and a resign hands
// the name to the next candidate at once. Followers watch the name, and
// see "unknown" rather than an old leader once their watch can no longer
// vouch for what it shows.

// Term is one leadership of a name: the lock the candidate was granted.
// Watch Done (or Context) and stop leading when it closes.
type Term struct {
	*Lock
}

// Campaign waits until this client is elected leader of name, with value
// (how followers reach it: an address, a URL), or until ctx ends; it
// retries as Acquire does. Candidates are elected in the order they
// campaigned.
func (c *Client) Campaign(ctx context.Context, name string, value []byte) (*Term, error) {
	if len(value) == 0 {
		return nil, errorf("monolock: campaign for %q: a leader's value must not be empty (followers reach the leader by it)", name)
	}
	l, err := c.Acquire(ctx, name, Value(value))
	if err != nil {
		return nil, err
	}
	return &Term{l}, nil
}

// Resign ends the term: the next candidate is elected at once.
func (t *Term) Resign() error { return t.Release() }

// LeaderState says what a follower knows of a name's leader.
type LeaderState int

const (
	// LeaderUnknown: the watch cannot vouch for anything now (its server went
	// silent, or it is between connections). Act on no leader.
	LeaderUnknown LeaderState = iota
	// NoLeader: nobody leads, and nobody is held back.
	NoLeader
	// Leading: the leader is Observation.Token, reached by its Value.
	Leading
	// LeaderHeldBack: no leader can be elected before Observation.Until: a
	// leader whose connection went (Token set, which may still act), or a
	// restarted or failed-over server waiting for leaders it does not know
	// (Token 0).
	LeaderHeldBack
)

func (s LeaderState) String() string {
	return [...]string{"unknown", "no leader", "leader", "held back"}[s]
}

// Observation is what a follower sees of a name's leadership at one
// moment.
type Observation struct {
	State    LeaderState
	Token    uint64
	Value    []byte
	Identity string
	Until    time.Time // HeldBack: how long
	// Candidates is how many claims wait to lead after this one.
	Candidates int
}

// Leader reads the watch's picture as an election: the first holder is
// the leader.
func (w *Watch) Leader() Observation { return leaderOf(w.State(), time.Now()) }

func leaderOf(st LockState, now time.Time) Observation {
	if !st.Known {
		return Observation{State: LeaderUnknown}
	}
	o := Observation{State: NoLeader, Candidates: len(st.Waiters)}
	if len(st.Holders) > 0 {
		h := st.Holders[0]
		o.Token, o.Value, o.Identity, o.State = h.Token, h.Value, h.Identity, Leading
		if !h.HeldBackUntil.IsZero() {
			o.State, o.Until = LeaderHeldBack, h.HeldBackUntil
		}
		return o
	}
	if st.BlockedUntil.After(now) {
		o.State, o.Until = LeaderHeldBack, st.BlockedUntil
	}
	return o
}

// Observe follows the leadership of name: the channel gets an
// Observation whenever it changes (a new leader, a new value, no leader,
// a hold, unknown), the first one as soon as it is known, until ctx
// ends; then it is closed. A slow reader misses nothing that still
// holds: each send is the state at that moment.
func (c *Client) Observe(ctx context.Context, name string) (<-chan Observation, error) {
	w, err := c.Watch(ctx, name)
	if err != nil {
		return nil, err
	}
	return observe(ctx, w), nil
}

// observe sends w's leadership changes until ctx or w ends, then closes
// w and the channel.
func observe(ctx context.Context, w *Watch) <-chan Observation {
	out := make(chan Observation)
	go func() {
		defer close(out)
		defer w.Close()
		var last *Observation
		timer := time.NewTimer(0)
		defer timer.Stop()
		for {
			now := time.Now()
			st := w.State()
			o := leaderOf(st, now)
			if last == nil || !sameObservation(*last, o) {
				select {
				case out <- o:
					last = &o
				case <-ctx.Done():
					return
				}
				continue // look again: the state may have moved meanwhile
			}
			timer.Reset(nextTransition(st, o, now))
			select {
			case <-ctx.Done():
				return
			case <-w.Done():
				return
			case <-w.Changed():
			case <-timer.C:
			}
		}
	}()
	return out
}

// nextTransition is how long until the observation can change with no
// event: its validity ends, or a hold ends.
func nextTransition(st LockState, o Observation, now time.Time) time.Duration {
	d := time.Hour
	if st.Known {
		d = min(d, st.ValidUntil.Sub(now))
	}
	if o.State == LeaderHeldBack && o.Token == 0 {
		d = min(d, o.Until.Sub(now))
	}
	return max(d, time.Millisecond)
}

func sameObservation(a, b Observation) bool {
	return a.State == b.State && a.Token == b.Token && bytes.Equal(a.Value, b.Value) &&
		a.Identity == b.Identity && a.Until.Equal(b.Until) && a.Candidates == b.Candidates
}

// Leader returns who leads name now: one watch, its first picture, closed.
func (c *Client) Leader(ctx context.Context, name string) (Observation, error) {
	w, err := c.Watch(ctx, name)
	if err != nil {
		return Observation{}, err
	}
	defer w.Close()
	return w.Leader(), nil
}
