// Package systems wraps each lock service under test (monolock and its
// peers) behind one small interface, each through its best-known Go recipe.
package systems

import (
	"context"
	"errors"
	"time"
)

// System is one lock service, connected and ready to hand out workers.
type System interface {
	// Name is the label used in tables and charts.
	Name() string
	// Worker returns a client for one worker goroutine. Implementations
	// share what their recipe shares (a connection pool, a session).
	Worker(ctx context.Context) (Worker, error)
	// Close releases everything the system opened on the client side.
	Close() error
}

// Worker acquires locks for one goroutine at a time.
type Worker interface {
	// Acquire blocks until name is held or ctx ends.
	Acquire(ctx context.Context, name string) (Held, error)
	Close() error
}

// Held is one granted lock.
type Held interface {
	Release() error
}

// Options are the knobs every recipe takes.
type Options struct {
	// Lease is the lease or TTL: how long a silent holder keeps the lock.
	Lease time.Duration
	// KeepAlive makes a holder refresh its lease while it holds the lock,
	// for recipes where the caller must do so itself (Redis). Off for the
	// throughput workloads, whose holders release at once.
	KeepAlive bool
	// Pool is the connection pool size for pooled recipes.
	Pool int
}

// Names of the systems, in report order.
const (
	Monolock  = "monolock"
	Redis     = "redis"
	Etcd      = "etcd"
	Postgres  = "postgres"
	ZooKeeper = "zookeeper"
)

// All lists every system in report order.
var All = []string{Monolock, Redis, Etcd, Postgres, ZooKeeper}

// Peer addresses, as started by scripts/peers.sh.
const (
	RedisAddr     = "127.0.0.1:16379"
	EtcdAddr      = "127.0.0.1:12379"
	PostgresAddr  = "127.0.0.1:15432"
	ZooKeeperAddr = "127.0.0.1:12181"
)

// Open connects to the named system. monolockAddr is the address of the
// monolock server started for this run.
func Open(ctx context.Context, name, monolockAddr string, o Options) (System, error) {
	switch name {
	case Monolock:
		return OpenMonolock(monolockAddr, o)
	case Redis:
		return OpenRedis(ctx, RedisAddr, o)
	case Etcd:
		return OpenEtcd(ctx, EtcdAddr, o)
	case Postgres:
		return OpenPostgres(ctx, PostgresAddr, o)
	case ZooKeeper:
		return OpenZooKeeper(ctx, ZooKeeperAddr, o)
	}
	return nil, errors.New("unknown system " + name)
}

// sharedWorker is a Worker of a recipe whose workers share everything with
// the System: closing it leaves the shared pool or session open.
type sharedWorker func(ctx context.Context, name string) (Held, error)

func (f sharedWorker) Acquire(ctx context.Context, name string) (Held, error) { return f(ctx, name) }
func (sharedWorker) Close() error                                             { return nil }
