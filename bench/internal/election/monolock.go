package election

import (
	"context"
	"sync"
	"time"

	"github.com/monolock/monolock/go/client"
)

// Monolock is the Go client's election: Client.Campaign for a term
// (Term.Proclaim, Term.Resign, Term.Done), Client.Observe for a follower,
// every participant its own Client with the given lease.
func Monolock(addr string, lease time.Duration) Recipe {
	return Recipe{
		Name:     "monolock",
		Upstream: addr,
		Join: func(_ context.Context, via string) (Participant, error) {
			c, err := client.New(client.WithServers(via), client.WithLease(lease))
			if err != nil {
				return nil, err
			}
			return &monoParticipant{c: c}, nil
		},
	}
}

type monoParticipant struct {
	c *client.Client

	mu    sync.Mutex
	terms []*client.Term // to resign on Close
}

func (p *monoParticipant) Campaign(ctx context.Context, name, value string) (Term, error) {
	t, err := p.c.Campaign(ctx, name, []byte(value))
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.terms = append(p.terms, t)
	p.mu.Unlock()
	return monoTerm{t}, nil
}

func (p *monoParticipant) Waiting(ctx context.Context, name string) (int, error) {
	o, err := p.c.Leader(ctx, name)
	return o.Candidates, err
}

func (p *monoParticipant) Observe(ctx context.Context, name string) (<-chan string, error) {
	in, err := p.c.Observe(ctx, name)
	if err != nil {
		return nil, err
	}
	out := make(chan string)
	go func() {
		defer close(out)
		for o := range in { // closed by the client when ctx ends
			select {
			case out <- leaderValue(o):
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// leaderValue is the value a follower may act on: a held-back leader
// (its connection went, and it may still act) is no leader to follow.
func leaderValue(o client.Observation) string {
	if o.State != client.Leading {
		return ""
	}
	return string(o.Value)
}

func (p *monoParticipant) Close() {
	p.mu.Lock()
	terms := p.terms
	p.mu.Unlock()
	for _, t := range terms {
		t.Resign() // at once after a loss, else at most a second
	}
}

type monoTerm struct{ t *client.Term }

func (t monoTerm) Proclaim(ctx context.Context, value string) error {
	return t.t.Proclaim(ctx, []byte(value))
}
func (t monoTerm) Resign(context.Context) error { return t.t.Resign() }
func (t monoTerm) Lost() <-chan struct{}        { return t.t.Done() }
