// Package election measures leader election on one name: how soon the
// next candidate is elected after the leader resigns or its link dies, how
// soon every follower knows, how soon followers see each value the leader
// proclaims, and how long a leader cut off by a link fault and its
// successor both believe they lead. It links no peer's client library:
// monolock's recipe is here, etcd's in package peerelection.
package election

import "context"

// Recipe is one system's election: how a participant joins, campaigns and
// observes.
type Recipe struct {
	Name     string // row label, e.g. "monolock"
	Upstream string // the server's address, which the fault proxy forwards to
	// Join connects a new participant through addr (the server's, or the
	// fault proxy's in front of it): its own client, and for a recipe that
	// needs one its own session, as a separate process would have.
	Join func(ctx context.Context, addr string) (Participant, error)
}

// Participant is one process of the election: a candidate, a follower, or
// both.
type Participant interface {
	// Campaign returns once this participant leads name with value, or
	// with ctx's error.
	Campaign(ctx context.Context, name, value string) (Term, error)
	// Waiting is how many candidates wait behind name's leader now.
	Waiting(ctx context.Context, name string) (int, error)
	// Observe sends the leader's value whenever what this follower knows
	// changes; "" when it knows of no leader it may act on (none, a held
	// back name, or it cannot tell). The channel closes when ctx ends.
	Observe(ctx context.Context, name string) (<-chan string, error)
	// Close ends everything the participant opened within about a second;
	// a term it still leads is given up.
	Close()
}

// Term is one leadership.
type Term interface {
	// Proclaim replaces the leader's value and returns once the server
	// has it.
	Proclaim(ctx context.Context, value string) error
	// Resign gives the leadership up so that the next candidate is elected.
	Resign(ctx context.Context) error
	// Lost is closed when the recipe tells the leader it may no longer
	// lead (monolock: Term.Done(); etcd: Session.Done()).
	Lost() <-chan struct{}
}
