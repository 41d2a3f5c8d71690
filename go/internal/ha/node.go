// Package ha makes several monolock servers one cell through etcd: they
// campaign for leadership, the leader is the one active server, and etcd
// keeps the token high-water mark and the longest lease the cell has
// acknowledged. Lock state stays in the active server's memory.
//
// Safety rests on two rules (docs/ha.md has the argument):
//   - The leader acknowledges nothing after its own etcd lease may have
//     expired: the send of its last acknowledged keep-alive plus the TTL,
//     less a margin for clock rate. Every reply checks this first.
//   - A new leader grants nothing until the longest recorded lease has
//     passed since it took over, so every claim the old leader acknowledged
//     has expired at its holder. The leader records a longer lease in etcd
//     before it acknowledges a session that asked for it.
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
}

// Server is what the node drives: the lock server of this process.
type Server interface {
	// Regrant grants the locks whose waiters had no token (grace over,
	// tokens reserved).
	Regrant()
	// StepDown ends every session with ERROR 0x01.
	StepDown(reason string)
	TokenFailure(err error)
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
	maxLease   atomic.Int64 // the longest lease recorded in etcd, ns
	leader     atomic.Value // string: the active server's address

	admitMu sync.Mutex // serialises AdmitLease's writes

	mu     sync.Mutex
	tokens *tokenstore.Store // the leader's; nil otherwise
	guard  *clientv3.Cmp     // holds while this node leads; nil otherwise
	failed error
}

// New connects to etcd. Bind the server, then Run.
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
	})
	if err != nil {
		return nil, fmt.Errorf("ha: etcd: %w", err)
	}
	n := &Node{cfg: cfg, cli: cli, log: cfg.Logger.With("cell", cfg.Prefix), base: time.Now()}
	n.leader.Store("")
	return n, nil
}

// Bind sets the server the node drives.
func (n *Node) Bind(s Server) { n.server = s }

// Close closes the etcd client.
func (n *Node) Close() error {
	n.mu.Lock()
	if n.tokens != nil {
		n.tokens.Close()
		n.tokens = nil
	}
	n.mu.Unlock()
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

// AdmitLease implements server.Gate: a lease longer than the recorded one
// is written to etcd (under the leadership guard) before it is acknowledged.
func (n *Node) AdmitLease(lease time.Duration) error {
	if int64(lease) <= n.maxLease.Load() {
		return nil
	}
	// One write at a time, so the value in etcd only grows: two longer
	// leases admitted at once must not let the shorter one land last.
	n.admitMu.Lock()
	defer n.admitMu.Unlock()
	if int64(lease) <= n.maxLease.Load() {
		return nil
	}
	n.mu.Lock()
	guard := n.guard
	n.mu.Unlock()
	if guard == nil {
		return errors.New("ha: not the leader")
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.TTL/2)
	defer cancel()
	resp, err := n.cli.Txn(ctx).If(*guard).
		Then(clientv3.OpPut(n.key("max-lease-ms"), strconv.FormatInt(lease.Milliseconds(), 10))).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return errors.New("ha: leadership lost")
	}
	n.maxLease.Store(int64(lease))
	return nil
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

// Run campaigns, leads while it can, and campaigns again, until ctx ends.
func (n *Node) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		err := n.term(ctx)
		if ctx.Err() != nil {
			break
		}
		n.log.Warn("ha: term ended; campaigning again", "err", err)
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
	}
	return nil
}

// term is one candidacy: an etcd lease kept alive by this node (so that it
// knows when the lease may have expired), a campaign, and leadership until
// the lease can no longer be trusted.
func (n *Node) term(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ttl := n.cfg.TTL
	sent := time.Now()
	grant, err := n.cli.Grant(ctx, int64(ttl/time.Second))
	if err != nil {
		return fmt.Errorf("grant lease: %w", err)
	}
	defer func() { // best effort: let the next leader start at once
		rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
		_, _ = n.cli.Revoke(rctx, grant.ID)
		rcancel()
	}()
	n.extend(sent)
	lost := make(chan error, 1)
	go n.keepAlive(ctx, grant.ID, lost)

	// The session's own keep-alive must end with the term: left running, it
	// could renew an old election key after a failed revoke and block every
	// other candidate.
	sess, err := concurrency.NewSession(n.cli, concurrency.WithLease(grant.ID), concurrency.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("session: %w", err)
	}
	election := concurrency.NewElection(sess, n.key("election"))
	go n.observe(ctx, election)
	if err := election.Campaign(ctx, n.cfg.Advertise); err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	if err := n.lead(ctx, election); err != nil {
		n.stepDown("could not take over: " + err.Error())
		return err
	}
	defer n.stepDown("lost leadership of the cell")
	select {
	case err := <-lost:
		return err
	case <-sess.Done():
		return errors.New("etcd session ended")
	case <-ctx.Done():
		return ctx.Err()
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

// keepAlive renews the lease every TTL/3 and reports on lost once the
// lease can no longer be trusted.
func (n *Node) keepAlive(ctx context.Context, id clientv3.LeaseID, lost chan<- error) {
	every := n.cfg.TTL / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sent := time.Now()
		kctx, cancel := context.WithTimeout(ctx, every)
		_, err := n.cli.KeepAliveOnce(kctx, id)
		cancel()
		if err == nil {
			n.extend(sent)
			continue
		}
		if errors.Is(err, context.Canceled) {
			return
		}
		if ok, _ := n.Active(time.Now()); !ok && Role(n.role.Load()) == Leader {
			lost <- fmt.Errorf("etcd lease no longer trusted: %w", err)
			return
		}
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			lost <- err
			return
		}
		n.log.Warn("ha: keep-alive failed", "err", err)
	}
}

// observe follows who leads, for the passive servers' redirects.
func (n *Node) observe(ctx context.Context, e *concurrency.Election) {
	for resp := range e.Observe(ctx) {
		if len(resp.Kvs) > 0 {
			n.leader.Store(string(resp.Kvs[0].Value))
		}
	}
}

// lead takes over: read the high-water mark and the longest lease under the
// leadership guard, reserve the first block of tokens, and start the grace
// period.
func (n *Node) lead(ctx context.Context, e *concurrency.Election) error {
	guard := clientv3.Compare(clientv3.CreateRevision(e.Key()), "=", e.Rev())
	resp, err := n.cli.Txn(ctx).If(guard).Then(
		clientv3.OpGet(n.key("token-hwm")), clientv3.OpGet(n.key("max-lease-ms"))).Commit()
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
	maxMS, err := uintValue(resp.Responses[1].GetResponseRange().Kvs)
	if err != nil {
		return fmt.Errorf("max-lease-ms: %w", err)
	}
	persist := func(top uint64) error {
		pctx, cancel := context.WithTimeout(context.Background(), n.cfg.TTL/2)
		defer cancel()
		r, err := n.cli.Txn(pctx).If(guard).
			Then(clientv3.OpPut(n.key("token-hwm"), strconv.FormatUint(top, 10))).Commit()
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
		return err
	}
	took := time.Now()
	grace := time.Duration(maxMS) * time.Millisecond
	n.mu.Lock()
	n.tokens, n.guard = tokens, &guard
	n.mu.Unlock()
	n.maxLease.Store(int64(grace))
	n.graceUntil.Store(n.since(took.Add(grace)))
	n.leader.Store(n.cfg.Advertise)
	n.role.Store(int32(Leader))
	n.log.Info("ha: leading the cell", "first_token_above", max(hwm, n.cfg.Floor), "grace", grace)
	time.AfterFunc(grace, n.server.Regrant) // the waiters that queued meanwhile
	return nil
}

// stepDown stops acknowledging and granting, then ends every session.
func (n *Node) stepDown(reason string) {
	if Role(n.role.Swap(int32(Follower))) != Leader {
		return
	}
	n.mu.Lock()
	tokens := n.tokens
	n.tokens, n.guard = nil, nil
	n.mu.Unlock()
	n.leader.CompareAndSwap(n.cfg.Advertise, "") // until etcd names the next one
	n.log.Warn("ha: stepping down", "reason", reason)
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
