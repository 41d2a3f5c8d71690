package monolock

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/monolock/monolock/go/client"
)

// Leader election (protocol version 3): a term is a Lock claimed with a
// value (how followers reach the leader); followers read the leader with
// Leader, or are told of every change by Observe.

// The states of a Leader.
const (
	// LeaderLeading: Token leads, reached by Value.
	LeaderLeading = "leader"
	// LeaderNone: nobody leads, and nobody is held back.
	LeaderNone = "no leader"
	// LeaderHeldBack: nobody can be elected for HeldBackMillis: a leader
	// whose connection went (Token set: it may still act), or a server
	// waiting for leaders it does not know after a restart (Token 0).
	LeaderHeldBack = "held back"
	// LeaderUnknown: the follower cannot vouch for anything now (its
	// server went silent or is being reconnected): act on no leader.
	LeaderUnknown = "unknown"
)

// Leader is what a follower knows of a name's leader at one moment.
type Leader struct {
	State          string
	Token          int64 // as Lock.Token: negative above 2^63-1
	TokenString    string
	Value          string
	Identity       string
	HeldBackMillis int64
	Candidates     int // claims waiting to lead next
}

// LeaderListener is told of every change of a name's leader (Observe),
// on a thread of the Go runtime, one call at a time, in order.
type LeaderListener interface {
	OnLeader(leader *Leader)
}

// Campaign waits until this client is elected leader of name with value
// (not empty), as Acquire waits for a lock (timeoutMillis, cancel). The
// Lock is the term: Token fences the leader's writes, SetLostListener
// tells of its loss before anyone else can be elected, Proclaim replaces
// the value, and Resign hands over at once.
func (c *Client) Campaign(name, value string, timeoutMillis int64, cancel *Canceller) (*Lock, error) {
	if value == "" {
		return nil, &failure{kind: KindValidation, code: NoCode, err: errors.New("monolock: a leader's value must not be empty (followers reach the leader by it)")}
	}
	return c.acquire(name, timeoutMillis, cancel, client.Value([]byte(value)))
}

// Proclaim replaces the value of a lock claimed with one (Campaign): the
// term goes on with the same token. It returns once the server has it, or
// with the lock's loss.
func (l *Lock) Proclaim(value string) error {
	if l.inner == nil {
		return classify(client.ErrReleased)
	}
	if err := l.inner.Proclaim(context.Background(), []byte(value)); err != nil {
		return classify(err)
	}
	return nil
}

// Resign ends the term: the next candidate is elected at once. It is
// Unlock.
func (l *Lock) Resign() { l.Unlock() }

// Leader returns who leads name now, waiting at most timeoutMillis to
// reach a server (NoTimeout: no limit; KindTimeout after).
func (c *Client) Leader(name string, timeoutMillis int64) (*Leader, error) {
	ctx, stop := context.WithCancel(context.Background())
	if timeoutMillis >= 0 {
		ctx, stop = context.WithTimeout(context.Background(), time.Duration(timeoutMillis)*time.Millisecond)
	}
	defer stop()
	o, err := c.inner.Leader(ctx, name)
	if err != nil {
		return nil, classify(err)
	}
	return leaderOf(o), nil
}

// Observer follows a name's leader until Stop.
type Observer struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// Observe tells listener of name's leader now, and of every change after
// (a new leader, a new value, no leader, a hold, unknown), until Stop. It
// returns once the first one is known, or fails after timeoutMillis
// (NoTimeout: no limit).
func (c *Client) Observe(name string, timeoutMillis int64, listener LeaderListener) (*Observer, error) {
	ctx, cancel := context.WithCancel(context.Background())
	var giveUp *time.Timer // nil: no limit
	if timeoutMillis >= 0 {
		giveUp = time.AfterFunc(time.Duration(timeoutMillis)*time.Millisecond, cancel)
	}
	changes, err := c.inner.Observe(ctx, name)
	if giveUp != nil && !giveUp.Stop() && err != nil {
		err = errors.Join(context.DeadlineExceeded, err)
	}
	if err != nil {
		cancel()
		return nil, classify(err)
	}
	o := &Observer{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(o.done)
		for change := range changes {
			listener.OnLeader(leaderOf(change))
		}
	}()
	return o, nil
}

// Stop ends the observation: the listener is not called after it returns.
// It waits for a call in progress, so never call it from the listener.
func (o *Observer) Stop() {
	if o.cancel == nil {
		return
	}
	o.cancel()
	<-o.done
}

func leaderOf(o client.Observation) *Leader {
	l := &Leader{Candidates: o.Candidates, Identity: o.Identity, Value: string(o.Value),
		Token: int64(o.Token), TokenString: strconv.FormatUint(o.Token, 10)}
	switch o.State {
	case client.Leading:
		l.State = LeaderLeading
	case client.NoLeader:
		l.State = LeaderNone
	case client.LeaderHeldBack:
		l.State = LeaderHeldBack
		l.HeldBackMillis = max(time.Until(o.Until).Milliseconds(), 0)
	default:
		l.State = LeaderUnknown
	}
	return l
}
