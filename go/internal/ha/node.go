// Package ha makes several monolock servers one cell through etcd: they
// campaign for leadership, the leader is the one active server, and etcd
// keeps the token high-water mark and the cell's lease record (how long a
// new leader holds back which locks). Lock state stays in the active
// server's memory.
//
// Safety rests on two rules (docs/ha.md has the argument):
//   - The leader acknowledges nothing after its own etcd lease may have
//     expired: the send of its last acknowledged keep-alive plus the TTL,
//     less a margin for clock rate. Every reply checks this first.
//   - A new leader grants a lock only once the wait the lease record
//     states for it has passed since it took over, so every claim the old
//     leader acknowledged on it has expired at its holder. The leader
//     records a lease in etcd (leaserecord.Record on a leaseStore) before
//     it acknowledges a session that asked for it.
package ha

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/monolock/monolock/go/internal/leaserecord"
	"github.com/monolock/monolock/go/internal/server"
	"github.com/monolock/monolock/go/internal/tokenstore"
)

// DefaultTTL is the etcd lease of a server's candidacy.
const DefaultTTL = 5 * time.Second

// Config configures a Node.
type Config struct {
	Endpoints []string
	Prefix    string // the cell's keys, e.g. /monolock/cell-a/
	Advertise string // the address clients use for this server
	TTL       time.Duration
	TLS       *tls.Config // for etcd; nil: plaintext
	Logger    *slog.Logger
	Floor     uint64 // tokens start above this too (--token-floor)
	BlockSize uint64 // tokens per reservation; 0: tokenstore's default
	// NamedLease is the lease record's threshold for leases recorded by
	// name; 0: leaserecord.DefaultNamedLease (tests).
	NamedLease time.Duration
}

// Server is what the node drives: the lock server of this process.
type Server interface {
	// Regrant grants the locks whose waiters had no token (grace over,
	// tokens reserved).
	Regrant()
	// StepDown ends every session with ERROR 0x01.
	StepDown(reason string)
	TokenFailure(err error)
	// HoldBack keeps a lock from being granted until until: a holder
	// under the previous leader may count on it that long.
	HoldBack(name string, until time.Time)
}

// Role is a node's part in the cell.
type Role int32

const (
	Follower Role = iota // passive: answers ACQUIRE with ERROR 0x01
	Leader               // active: serves the cell's locks
)

func (r Role) String() string { return [...]string{"follower", "leader"}[r] }

// Node is one server's membership in the cell. It implements the server's
// Gate and Tokens.
type Node struct {
	cfg    Config
	cli    *clientv3.Client
	log    *slog.Logger
	server Server
	base   time.Time // the monotonic origin of the deadlines below

	role       atomic.Int32
	validUntil atomic.Int64 // leader: acknowledge only before base+this
	graceUntil atomic.Int64 // leader: grant only from base+this on
	leader     atomic.Value // string: the active server's address

	mu     sync.Mutex
	tokens *tokenstore.Store   // the leader's; nil otherwise
	leases *leaserecord.Record // the leader's; nil otherwise
	stale  []clientv3.LeaseID  // earlier terms' leases not yet revoked
}

// New connects to etcd; Run then drives a server.
func New(cfg Config) (*Node, error) {
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.TTL < 2*time.Second || cfg.TTL%time.Second != 0 {
		return nil, fmt.Errorf("ha: etcd TTL %v: want whole seconds, at least 2s", cfg.TTL)
	}
	if cfg.Advertise == "" || cfg.Prefix == "" || len(cfg.Endpoints) == 0 {
		return nil, errors.New("ha: need etcd endpoints, a prefix and an advertised address")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: cfg.Endpoints, DialTimeout: cfg.TTL, TLS: cfg.TLS,
		Logger: nil, // etcd's zap logger: its defaults are fine and quiet enough
		// gRPC's reconnect back-off grows to 2 minutes while etcd is down;
		// each second of it is a second without a leader once etcd is back.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: cfg.TTL,
		})},
	})
	if err != nil {
		return nil, fmt.Errorf("ha: etcd: %w", err)
	}
	n := &Node{cfg: cfg, cli: cli, log: cfg.Logger.With("cell", cfg.Prefix), base: time.Now()}
	n.leader.Store("")
	return n, nil
}

// Close closes the etcd client.
func (n *Node) Close() error {
	n.mu.Lock()
	tokens, leases := n.tokens, n.leases
	n.tokens, n.leases = nil, nil
	n.mu.Unlock()
	if leases != nil {
		leases.Close()
	}
	if tokens != nil {
		tokens.Close()
	}
	return n.cli.Close()
}

func (n *Node) since(t time.Time) int64 { return int64(t.Sub(n.base)) }

// Role returns this node's role now (a leader past its deadline is none).
func (n *Node) Role() Role {
	if ok, _ := n.Active(time.Now()); ok {
		return Leader
	}
	return Follower
}

// Advertise returns the address this server gives clients.
func (n *Node) Advertise() string { return n.cfg.Advertise }

// Leader returns the address of the cell's active server, as etcd says.
func (n *Node) Leader() string { return n.leader.Load().(string) }

// Status implements server.Gate.
func (n *Node) Status() server.CellStatus {
	ok, leader := n.Active(time.Now())
	role := Follower
	if ok {
		role, leader = Leader, n.cfg.Advertise
	}
	return server.CellStatus{Role: role.String(), Leader: leader, Grace: n.GraceRemaining()}
}

// GraceRemaining is how long a new leader still waits before it grants.
func (n *Node) GraceRemaining() time.Duration {
	if Role(n.role.Load()) != Leader {
		return 0
	}
	return max(0, time.Duration(n.graceUntil.Load()-n.since(time.Now())))
}

// Active implements server.Gate. An inactive node never names itself as
// the active server: past its deadline it still holds its own address until
// it steps down, and after that etcd may name its old, not yet expired
// election key for a while. It names nobody then.
func (n *Node) Active(now time.Time) (bool, string) {
	if Role(n.role.Load()) == Leader && n.since(now) < n.validUntil.Load() {
		return true, ""
	}
	if leader := n.Leader(); leader != n.cfg.Advertise {
		return false, leader
	}
	return false, ""
}

// Leases implements server.Gate: the lease record of this node's term
// while it leads.
func (n *Node) Leases() *leaserecord.Record {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.leases
}

// Next implements server.Tokens: the leader's tokens once its grace is
// over; otherwise "none yet", so claims stay queued.
func (n *Node) Next() (uint64, error) {
	if ok, _ := n.Active(time.Now()); !ok {
		return 0, &tokenstore.UnavailableError{Cause: errors.New("not the active server")}
	}
	if n.since(time.Now()) < n.graceUntil.Load() {
		return 0, &tokenstore.UnavailableError{Cause: errors.New("waiting out the previous leader's leases")}
	}
	n.mu.Lock()
	tokens := n.tokens
	n.mu.Unlock()
	if tokens == nil {
		return 0, &tokenstore.UnavailableError{}
	}
	return tokens.Next()
}

// InHand implements server.Tokens: Next waits only in the tokens of its
// term.
func (n *Node) InHand() bool {
	n.mu.Lock()
	tokens := n.tokens
	n.mu.Unlock()
	return tokens == nil || tokens.InHand()
}

// Failure implements server.Tokens.
func (n *Node) Failure() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.tokens != nil {
		return n.tokens.Failure()
	}
	return nil
}

func (n *Node) key(name string) string { return n.cfg.Prefix + name }

// retryTerm spaces the terms of a server that cannot reach etcd. A grant
// that waits for a quorum completes once the quorum is back; one that
// timed out (after a TTL: a loaded etcd can take over a second to commit
// one) is tried again retryTerm later.
const retryTerm = 500 * time.Millisecond

// Run campaigns, leads while it can, and campaigns again, until ctx ends,
// driving srv: it regrants, steps down and holds back locks as the cell
// requires.
func (n *Node) Run(ctx context.Context, srv Server) error {
	// Set before the first term, read by it only: the server is given to
	// the node where the node starts to drive it, not bound to it later.
	n.server = srv
	for ctx.Err() == nil {
		err := n.term(ctx)
		if ctx.Err() != nil {
			break
		}
		n.log.Warn("ha: term ended; campaigning again", "err", err)
		select {
		case <-time.After(retryTerm):
		case <-ctx.Done():
		}
	}
	return nil
}

// term is one candidacy: an etcd lease kept alive by this node (so that it
// knows when the lease may have expired), a campaign, and leadership. The
// term ends as soon as the lease can no longer be trusted, campaigning or
// leading: a candidate that waited out an etcd outage on a lease it could
// not renew would win only to step down at once, and the next such
// candidate after it, each with a token block of its own.
func (n *Node) term(ctx context.Context) error {
	ctx, end := context.WithCancelCause(ctx)
	defer end(nil)
	ttl := n.cfg.TTL
	sent := time.Now()
	gctx, gcancel := context.WithTimeout(ctx, ttl)
	grant, err := n.cli.Grant(gctx, int64(ttl/time.Second))
	gcancel()
	if err != nil {
		return fmt.Errorf("grant lease: %w", err)
	}
	defer n.revoke(context.Background(), grant.ID)
	n.extend(sent)
	n.revokeStale(ctx)
	go n.keepAlive(ctx, grant.ID, end)

	// The session's own keep-alive must end with the term: left running, it
	// could renew an old election key after a failed revoke and block every
	// other candidate. Its Done is not a sign of a lost lease: the client
	// gives up on a keep-alive stream that etcd did not answer for a TTL,
	// although etcd, once back, keeps the lease; keepAlive decides.
	sess, err := concurrency.NewSession(n.cli, concurrency.WithLease(grant.ID), concurrency.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("session: %w", err)
	}
	election := concurrency.NewElection(sess, n.key("election"))
	go n.observe(ctx, election)
	if err := election.Campaign(ctx, n.cfg.Advertise); err != nil {
		return fmt.Errorf("campaign: %w", causeOr(ctx, err))
	}
	// A win is acted on only with a lease that etcd renews now: the
	// campaign may have waited out an outage.
	if err := n.renew(ctx, grant.ID); err != nil {
		return fmt.Errorf("won the election on a lease etcd no longer keeps: %w", err)
	}
	if err := n.lead(ctx, election); err != nil {
		n.stepDown("could not take over: " + err.Error())
		return err
	}
	defer n.stepDown("lost leadership of the cell")
	<-ctx.Done()
	return context.Cause(ctx)
}

// causeOr is why ctx ended, if it did, else err.
func causeOr(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil {
		return cause
	}
	return err
}

// revoke ends a term's etcd lease, so that the next leader need not wait
// for it to expire. A revoke that fails (etcd unreachable) is retried at
// the start of the next term, which can only start once etcd answers: a
// lease that etcd kept through an outage would otherwise hold this node's
// old election key, and every campaign behind it, for a TTL.
func (n *Node) revoke(ctx context.Context, id clientv3.LeaseID) {
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := n.cli.Revoke(rctx, id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		n.mu.Lock()
		n.stale = append(n.stale, id) // its TTL ends it at the latest
		n.mu.Unlock()
	}
}

// revokeStale revokes the leases of earlier terms that could not be.
func (n *Node) revokeStale(ctx context.Context) {
	n.mu.Lock()
	stale := n.stale
	n.stale = nil
	n.mu.Unlock()
	for _, id := range stale {
		n.revoke(ctx, id)
	}
}

// safetyMargin keeps the leader's deadline inside its etcd lease however
// the two clocks' rates differ (they drift by parts per million).
func (n *Node) safetyMargin() time.Duration { return n.cfg.TTL / 20 }

// extend moves the deadline to sent + TTL - margin, sent being when the
// acknowledged keep-alive (or grant) was sent: etcd's lease cannot expire
// before that, as etcd received the request after it was sent.
func (n *Node) extend(sent time.Time) {
	n.validUntil.Store(n.since(sent.Add(n.cfg.TTL - n.safetyMargin())))
}

// keepAlive renews the lease every TTL/3 and ends the term once the
// lease can no longer be trusted.
func (n *Node) keepAlive(ctx context.Context, id clientv3.LeaseID, end context.CancelCauseFunc) {
	t := time.NewTicker(n.cfg.TTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := n.renew(ctx, id)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			end(err)
			return
		case n.since(time.Now()) >= n.validUntil.Load():
			end(fmt.Errorf("etcd lease no longer trusted: %w", err))
			return
		default:
			n.log.Warn("ha: keep-alive failed", "err", err)
		}
	}
}

// renew keeps the lease alive once and moves the deadline.
func (n *Node) renew(ctx context.Context, id clientv3.LeaseID) error {
	sent := time.Now()
	kctx, cancel := context.WithTimeout(ctx, n.cfg.TTL/3)
	defer cancel()
	if _, err := n.cli.KeepAliveOnce(kctx, id); err != nil {
		return err
	}
	n.extend(sent)
	return nil
}

// observe follows who leads, for the passive servers' redirects.
func (n *Node) observe(ctx context.Context, e *concurrency.Election) {
	for resp := range e.Observe(ctx) {
		if len(resp.Kvs) > 0 {
			n.leader.Store(string(resp.Kvs[0].Value))
		}
	}
}

// lead takes over: read the high-water mark and the lease record under
// the leadership guard, hold back the locks the record names, reserve the
// first block of tokens, and start the grace period for every lock.
func (n *Node) lead(ctx context.Context, e *concurrency.Election) error {
	guard := clientv3.Compare(clientv3.CreateRevision(e.Key()), "=", e.Rev())
	resp, err := n.cli.Txn(ctx).If(guard).Then(clientv3.OpGet(n.key(tokenHWM))).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return errors.New("leadership lost while taking over")
	}
	hwm, err := uintValue(resp.Responses[0].GetResponseRange().Kvs)
	if err != nil {
		return fmt.Errorf("token-hwm: %w", err)
	}
	// The record before the first token reservation: its Load tells from
	// token-hwm whether the leader before was of an earlier version.
	leases, err := leaserecord.OpenStore(&leaseStore{n: n, guard: guard}, leaserecord.Options{NamedLease: n.cfg.NamedLease})
	if err != nil {
		return fmt.Errorf("lease record: %w", err)
	}
	persist := func(top uint64) error {
		pctx, cancel := context.WithTimeout(context.Background(), n.cfg.TTL/2)
		defer cancel()
		r, err := n.cli.Txn(pctx).If(guard).Then(
			clientv3.OpPut(n.key(tokenHWM), strconv.FormatUint(top, 10)),
			clientv3.OpPut(n.key(leasesVersion), "1")).Commit()
		if err != nil {
			return err
		}
		if !r.Succeeded {
			return errors.New("leadership lost")
		}
		return nil
	}
	tokens, err := tokenstore.New(hwm, persist, tokenstore.Options{
		BlockSize: n.cfg.BlockSize, Floor: n.cfg.Floor,
		OnReady: n.server.Regrant, OnFailure: n.server.TokenFailure,
	})
	if err != nil {
		leases.Close()
		return err
	}
	all, locks := leases.Inherited()
	for name, until := range locks {
		n.server.HoldBack(name, until)
	}
	grace := max(0, time.Until(all))
	n.mu.Lock()
	n.tokens, n.leases = tokens, leases
	n.mu.Unlock()
	n.graceUntil.Store(n.since(time.Now().Add(grace)))
	n.leader.Store(n.cfg.Advertise)
	n.role.Store(int32(Leader))
	n.log.Info("ha: leading the cell", "first_token_above", max(hwm, n.cfg.Floor),
		"grace", grace.Round(time.Millisecond), "locks_held_longer", len(locks))
	time.AfterFunc(grace, n.server.Regrant) // the waiters that queued meanwhile
	return nil
}

// stepDown stops acknowledging and granting, then ends every session. The
// lease record stays as its last write left it, as after a crash: this
// node may no longer lead, and the next leader reads it.
func (n *Node) stepDown(reason string) {
	if Role(n.role.Swap(int32(Follower))) != Leader {
		return
	}
	n.mu.Lock()
	tokens, leases := n.tokens, n.leases
	n.tokens, n.leases = nil, nil
	n.mu.Unlock()
	n.leader.CompareAndSwap(n.cfg.Advertise, "") // until etcd names the next one
	n.log.Warn("ha: stepping down", "reason", reason)
	if leases != nil {
		leases.Close()
	}
	n.server.StepDown(reason)
	if tokens != nil {
		tokens.Close()
	}
}

func uintValue(kvs []*mvccpb.KeyValue) (uint64, error) {
	if len(kvs) == 0 {
		return 0, nil
	}
	return strconv.ParseUint(string(kvs[0].Value), 10, 64)
}
