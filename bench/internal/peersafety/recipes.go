// Package peersafety is the peers' recipes (etcd, redsync, ZooKeeper,
// PostgreSQL) for package safety's safety-margin measurement: each the
// peer's own way for a holder to learn that it lost its lock.
package peersafety

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/monolock/monolock/bench/internal/peers"
	"github.com/monolock/monolock/bench/internal/safety"
	"github.com/monolock/monolock/bench/internal/systems"
)

// closeTimeout bounds each cleanup call of a trial.
const closeTimeout = 3 * time.Second

// ---------------------------------------------------------------- etcd

// Etcd is etcd's v3 client recipe: a concurrency.Session (a lease of TTL
// seconds, kept alive by the client) and a concurrency.Mutex on it. The
// holder is told when Session.Done() closes: the client's keepalive loop
// gave the lease up (no keepalive reply for a TTL, checked every 500 ms)
// or the server said it expired.
func Etcd(lease time.Duration) safety.Recipe {
	return safety.Recipe{
		Name:     "etcd",
		Signal:   "`Session.Done()`",
		Upstream: systems.EtcdAddr,
		New: func(name string) safety.Trial {
			return &etcdTrial{Events: safety.NewEvents(), key: "/lock/" + name, ttl: peers.EtcdTTL(lease)}
		},
	}
}

type etcdTrial struct {
	safety.Events
	key string
	ttl int

	hcli, ccli *clientv3.Client
	cs         *concurrency.Session
	cancel     context.CancelFunc
	wg         sync.WaitGroup
}

func etcdClient(addr string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

func (t *etcdTrial) Hold(ctx context.Context, addr string) error {
	var err error
	if t.hcli, err = etcdClient(addr); err != nil {
		return err
	}
	// The session's own context is not ctx: ctx bounds the setup only.
	s, err := concurrency.NewSession(t.hcli, concurrency.WithTTL(t.ttl))
	if err != nil {
		return err
	}
	if err := concurrency.NewMutex(s, t.key).Lock(ctx); err != nil {
		return err
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		select {
		case <-s.Done():
			if !t.Stopped() {
				t.Tell(time.Now())
			}
		case <-t.Halted():
		}
	}()
	return nil
}

func (t *etcdTrial) Compete(ctx context.Context) error {
	var err error
	if t.ccli, err = etcdClient(systems.EtcdAddr); err != nil {
		return err
	}
	if t.cs, err = concurrency.NewSession(t.ccli, concurrency.WithTTL(t.ttl)); err != nil {
		return err
	}
	lctx, cancel := context.WithCancel(context.Background())
	t.cancel = cancel
	m := concurrency.NewMutex(t.cs, t.key)
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		if m.Lock(lctx) == nil {
			t.Grant(time.Now())
		}
	}()
	// Queued once its key is there beside the holder's.
	return t.WaitFor(ctx, func() bool {
		gctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		r, err := t.ccli.Get(gctx, t.key+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && r.Count >= 2
	})
}

func (t *etcdTrial) Close() {
	t.Halt()
	if t.cancel != nil {
		t.cancel()
	}
	if t.cs != nil {
		t.cs.Close() // revokes the lease: the competitor's key goes with it
	}
	if t.ccli != nil {
		t.ccli.Close()
	}
	// The holder's lease is left to expire: revoking it would go through
	// the closed proxy.
	if t.hcli != nil {
		t.hcli.Close()
	}
	t.wg.Wait()
}

// ---------------------------------------------------------------- redsync

// Redsync is the redsync v4 mutex on one Redis (go-redis v9 with its
// default timeouts), its expiry the lease, extended every lease/4 by the
// holder. With watchUntil the holder is told when Until() passes without a
// newer successful Extend (Until is the expiry minus a drift allowance of
// 1 % + the time the call took); otherwise it is told by the first
// Extend that fails (an error or false).
func Redsync(lease time.Duration, watchUntil bool) safety.Recipe {
	r := safety.Recipe{Name: "redsync (Extend error)", Signal: "the first `Extend()` that fails", Upstream: systems.RedisAddr}
	if watchUntil {
		r.Name, r.Signal = "redsync (Until)", "time passes `Until()` without a newer `Extend()`"
	}
	r.New = func(name string) safety.Trial {
		return &redsyncTrial{Events: safety.NewEvents(), key: "lock:" + name, lease: lease, watchUntil: watchUntil}
	}
	return r
}

type redsyncTrial struct {
	safety.Events
	key        string
	lease      time.Duration
	watchUntil bool

	hrdb, crdb *redis.Client
	hm, cm     *redsync.Mutex
	cancel     context.CancelFunc
	wg         sync.WaitGroup

	mu    sync.Mutex
	until time.Time // the holder's Until() after its last successful Extend
	won   bool
}

func (t *redsyncTrial) Hold(ctx context.Context, addr string) error {
	t.hrdb = redis.NewClient(&redis.Options{Addr: addr})
	t.hm = redsync.New(goredis.NewPool(t.hrdb)).NewMutex(t.key, redsync.WithExpiry(t.lease))
	if err := t.hm.LockContext(ctx); err != nil {
		return err
	}
	t.until = t.hm.Until()
	extended := make(chan struct{}, 1)
	gaveUp := make(chan struct{}) // the Until watch told the holder: stop extending
	t.wg.Add(1)
	go func() { // the holder's refresh loop: Extend every lease/4
		defer t.wg.Done()
		tick := time.NewTicker(t.lease / 4)
		defer tick.Stop()
		for {
			select {
			case <-t.Halted():
				return
			case <-gaveUp:
				return
			case <-tick.C:
			}
			ok, err := t.hm.Extend()
			if t.Stopped() {
				return
			}
			if ok && err == nil {
				t.mu.Lock()
				t.until = t.hm.Until()
				t.mu.Unlock()
				select {
				case extended <- struct{}{}:
				default:
				}
				continue
			}
			if !t.watchUntil {
				t.Tell(time.Now())
				return
			}
		}
	}()
	if t.watchUntil {
		t.wg.Add(1)
		go func() { // the application's watch of Until()
			defer t.wg.Done()
			for {
				t.mu.Lock()
				u := t.until
				t.mu.Unlock()
				d := time.Until(u)
				if d <= 0 {
					t.Tell(time.Now())
					close(gaveUp)
					return
				}
				timer := time.NewTimer(d)
				select {
				case <-t.Halted():
					timer.Stop()
					return
				case <-extended:
					timer.Stop()
				case <-timer.C:
				}
			}
		}()
	}
	return nil
}

func (t *redsyncTrial) Compete(ctx context.Context) error {
	t.crdb = redis.NewClient(&redis.Options{Addr: systems.RedisAddr})
	t.cm = redsync.New(goredis.NewPool(t.crdb)).NewMutex(t.key, redsync.WithExpiry(t.lease), redsync.WithTries(math.MaxInt32))
	lctx, cancel := context.WithCancel(context.Background())
	t.cancel = cancel
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		if t.cm.LockContext(lctx) == nil {
			t.Grant(time.Now())
			t.mu.Lock()
			t.won = true
			t.mu.Unlock()
		}
	}()
	// No queue: the competitor polls every 50-250 ms. Give it a few tries.
	return t.Settle(ctx, 300*time.Millisecond)
}

func (t *redsyncTrial) Close() {
	t.Halt()
	if t.cancel != nil {
		t.cancel()
	}
	// Closing the holder's client ends an Extend blocked on the dead link.
	if t.hrdb != nil {
		t.hrdb.Close()
	}
	t.wg.Wait()
	t.mu.Lock()
	won := t.won
	t.mu.Unlock()
	if won {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		t.cm.UnlockContext(ctx)
		cancel()
	}
	if t.crdb != nil {
		t.crdb.Close()
	}
}

// ---------------------------------------------------------------- ZooKeeper

// ZooKeeper is go-zookeeper's zk.Lock (an ephemeral sequential node under
// the lock's path; the lowest holds it) on a session whose timeout is the
// lease. The holder is told by its session's event channel: the first
// StateDisconnected or StateExpired after the grant (go-zookeeper gives up
// a connection that read nothing for 2/3 of the session timeout, and pings
// every 1/3).
func ZooKeeper(lease time.Duration) safety.Recipe {
	return safety.Recipe{
		Name:     "zookeeper",
		Signal:   "session event `StateDisconnected` or `StateExpired`",
		Upstream: systems.ZooKeeperAddr,
		New: func(name string) safety.Trial {
			return &zkTrial{Events: safety.NewEvents(), path: "/lock/" + name, lease: lease}
		},
	}
}

type zkTrial struct {
	safety.Events
	path  string
	lease time.Duration

	hconn, cconn *zk.Conn
	wg           sync.WaitGroup
	mu           sync.Mutex
	won          *zk.Lock
}

type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

func (t *zkTrial) Hold(ctx context.Context, addr string) error {
	conn, evs, err := zk.Connect([]string{addr}, t.lease, zk.WithLogger(quietLogger{}))
	if err != nil {
		return err
	}
	t.hconn = conn
	var (
		armed   = make(chan struct{})
		session = make(chan struct{})
		once    sync.Once
	)
	t.wg.Add(1)
	go func() { // drains the channel until Close closes it
		defer t.wg.Done()
		for ev := range evs {
			if ev.State == zk.StateHasSession {
				once.Do(func() { close(session) })
			}
			select {
			case <-armed:
			default:
				continue
			}
			if ev.State == zk.StateDisconnected || ev.State == zk.StateExpired {
				if !t.Stopped() {
					t.Tell(time.Now())
				}
			}
		}
	}()
	select {
	case <-session:
	case <-ctx.Done():
		return fmt.Errorf("zookeeper session: %w", ctx.Err())
	}
	l := zk.NewLock(conn, t.path, zk.WorldACL(zk.PermAll))
	done := make(chan error, 1)
	go func() { done <- l.Lock() }()
	select {
	case err := <-done:
		if err != nil {
			return err
		}
	case <-ctx.Done():
		return ctx.Err() // Close closes the session, which ends Lock
	}
	close(armed)
	return nil
}

func (t *zkTrial) Compete(ctx context.Context) error {
	conn, err := peers.DialZooKeeper(ctx, systems.ZooKeeperAddr, t.lease)
	if err != nil {
		return err
	}
	t.cconn = conn
	l := zk.NewLock(conn, t.path, zk.WorldACL(zk.PermAll))
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		if l.Lock() == nil {
			t.Grant(time.Now())
			t.mu.Lock()
			t.won = l
			t.mu.Unlock()
		}
	}()
	// Queued once its node is there beside the holder's.
	return t.WaitFor(ctx, func() bool {
		children, _, err := conn.Children(t.path)
		return err == nil && len(children) >= 2
	})
}

func (t *zkTrial) Close() {
	t.Halt()
	t.mu.Lock()
	won := t.won
	t.mu.Unlock()
	if won != nil {
		won.Unlock()
	}
	if t.cconn != nil {
		t.cconn.Close() // ends a Lock still waiting
	}
	if t.hconn != nil {
		t.hconn.Close()
	}
	t.wg.Wait()
}

// ---------------------------------------------------------------- PostgreSQL

// Postgres is a session-level advisory lock: pg_advisory_lock on a
// dedicated connection, held as long as the server session lives. The
// holder is told when its connection fails: it waits on the connection
// (WaitForNotification, as a LISTEN loop would), which returns the
// connection's error the moment the client's socket reports one.
func Postgres() safety.Recipe {
	return safety.Recipe{
		Name:     "postgres",
		Signal:   "an error on the holder's connection",
		Upstream: systems.PostgresAddr,
		New: func(name string) safety.Trial {
			return &pgTrial{Events: safety.NewEvents(), key: peers.AdvisoryKey(name)}
		},
	}
}

type pgTrial struct {
	safety.Events
	key int64

	hconn, cconn *pgx.Conn
	hcancel      context.CancelFunc
	ccancel      context.CancelFunc
	wg           sync.WaitGroup
}

func pgConnect(ctx context.Context, addr string) (*pgx.Conn, error) {
	return pgx.Connect(ctx, "postgres://postgres@"+addr+"/postgres?sslmode=disable&connect_timeout=5")
}

func (t *pgTrial) Hold(ctx context.Context, addr string) error {
	var err error
	if t.hconn, err = pgConnect(ctx, addr); err != nil {
		return err
	}
	if _, err := t.hconn.Exec(ctx, "SELECT pg_advisory_lock($1)", t.key); err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(context.Background())
	t.hcancel = cancel
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		for {
			err := t.hconn.PgConn().WaitForNotification(wctx)
			if t.Stopped() || wctx.Err() != nil {
				return
			}
			if err != nil {
				t.Tell(time.Now())
				return
			}
		}
	}()
	return nil
}

func (t *pgTrial) Compete(ctx context.Context) error {
	var err error
	if t.cconn, err = pgConnect(ctx, systems.PostgresAddr); err != nil {
		return err
	}
	lctx, cancel := context.WithCancel(context.Background())
	t.ccancel = cancel
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		if _, err := t.cconn.Exec(lctx, "SELECT pg_advisory_lock($1)", t.key); err == nil {
			t.Grant(time.Now())
		}
	}()
	// Queued once the server shows its request waiting. The check runs on
	// a connection of its own: the other two are busy.
	check, err := pgConnect(ctx, systems.PostgresAddr)
	if err != nil {
		return err
	}
	defer check.Close(context.Background())
	hi, lo := uint32(uint64(t.key)>>32), uint32(uint64(t.key))
	return t.WaitFor(ctx, func() bool {
		var n int
		err := check.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND classid::bigint = $1 AND objid::bigint = $2",
			int64(hi), int64(lo)).Scan(&n)
		return err == nil && n > 0
	})
}

func (t *pgTrial) Close() {
	t.Halt()
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	if t.hcancel != nil {
		t.hcancel()
	}
	if t.ccancel != nil {
		t.ccancel()
	}
	t.wg.Wait()
	if t.hconn != nil {
		t.hconn.Close(ctx)
	}
	if t.cconn != nil {
		t.cconn.Close(ctx) // ends the session: its advisory lock goes with it
	}
}
