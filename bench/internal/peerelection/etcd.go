// Package peerelection is etcd's election recipe for package election:
// the v3 client's concurrency.Election on a concurrency.Session.
package peerelection

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/monolock/monolock/bench/internal/election"
	"github.com/monolock/monolock/bench/internal/peers"
	"github.com/monolock/monolock/bench/internal/systems"
)

// closeTimeout bounds the revoke of a participant's lease when it closes.
const closeTimeout = time.Second

// Etcd is etcd's election: every participant a client of its own with a
// Session (a lease of the TTL, kept alive by the client), Campaign /
// Proclaim / Resign on a concurrency.Election, Election.Observe for a
// follower, and Session.Done() as the leader's loss signal.
func Etcd(lease time.Duration) election.Recipe {
	ttl := peers.EtcdTTL(lease)
	return election.Recipe{
		Name:     systems.Etcd,
		Upstream: systems.EtcdAddr,
		Join: func(_ context.Context, addr string) (election.Participant, error) {
			// clientv3.New waits for the connection (up to DialTimeout).
			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				return nil, err
			}
			// The session lives as long as the participant, not as the
			// setup's context: its keepalive stops with the context given.
			s, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl))
			if err != nil {
				cli.Close()
				return nil, err
			}
			return &participant{cli: cli, s: s}, nil
		},
	}
}

type participant struct {
	cli *clientv3.Client
	s   *concurrency.Session
}

// prefix is the election's key prefix for a name.
func prefix(name string) string { return "/election/" + name }

func (p *participant) Campaign(ctx context.Context, name, value string) (election.Term, error) {
	e := concurrency.NewElection(p.s, prefix(name))
	if err := e.Campaign(ctx, value); err != nil {
		return nil, err
	}
	return term{e: e, s: p.s}, nil
}

// Waiting counts the candidates' keys under the election's prefix: the
// first is the leader's, each other a campaign waiting its turn.
func (p *participant) Waiting(ctx context.Context, name string) (int, error) {
	r, err := p.cli.Get(ctx, prefix(name)+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return max(0, int(r.Count)-1), nil
}

func (p *participant) Observe(ctx context.Context, name string) (<-chan string, error) {
	in := concurrency.NewElection(p.s, prefix(name)).Observe(ctx)
	out := make(chan string)
	go func() {
		defer close(out)
		for r := range in { // closed by the recipe when ctx ends
			v := ""
			if len(r.Kvs) > 0 {
				v = string(r.Kvs[0].Value)
			}
			select {
			case out <- v:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// Close revokes the session's lease (its keys, a term among them, go with
// it), bounded: a leader whose link is dead cannot revoke, and its lease
// has expired on the server anyway.
func (p *participant) Close() {
	p.s.Orphan()
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_, _ = p.cli.Revoke(ctx, p.s.Lease())
	p.cli.Close()
}

type term struct {
	e *concurrency.Election
	s *concurrency.Session
}

func (t term) Proclaim(ctx context.Context, value string) error { return t.e.Proclaim(ctx, value) }
func (t term) Resign(ctx context.Context) error                 { return t.e.Resign(ctx) }
func (t term) Lost() <-chan struct{}                            { return t.s.Done() }
