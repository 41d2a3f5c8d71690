// Package peers connects to the peers monolock is measured beside (Redis,
// etcd, PostgreSQL, ZooKeeper), each through its best-known Go recipe,
// behind package systems' interface. It is the one package of the
// benchmark's throughput, handoff and dead-holder workloads that links the
// peers' client libraries.
package peers

import (
	"context"
	"errors"

	"github.com/monolock/monolock/bench/internal/systems"
)

// Open connects to the named system. localAddr is the address of the
// server started for this run: `monolock serve` for the monolock systems,
// `bench floor` for systems.Floor and systems.SessionFloor.
func Open(ctx context.Context, name, localAddr string, o systems.Options) (systems.System, error) {
	switch name {
	case systems.Floor, systems.MonolockBare:
		return systems.OpenBare(name, localAddr, o)
	case systems.SessionFloor, systems.MonolockSessionBare:
		return systems.OpenBareSession(name, localAddr, o)
	case systems.Monolock:
		return systems.OpenMonolock(localAddr, o)
	case systems.MonolockBefore: // the same client against the older server
		return systems.OpenMonolockNamed(name, localAddr, o)
	case systems.MonolockSession:
		return systems.OpenMonolockSession(localAddr, o)
	case systems.MonolockTLS, systems.MonolockTLSNoResume:
		return systems.OpenMonolockNamed(name, localAddr, o)
	case systems.MonolockSessionTLS:
		return systems.OpenMonolockSessionNamed(name, localAddr, o)
	case systems.Redis:
		return OpenRedis(ctx, systems.RedisAddr, o)
	case systems.Etcd:
		return OpenEtcd(ctx, systems.EtcdAddr, o)
	case systems.Postgres:
		return OpenPostgres(ctx, systems.PostgresAddr, o)
	case systems.ZooKeeper:
		return OpenZooKeeper(ctx, systems.ZooKeeperAddr, o)
	}
	return nil, errors.New("unknown system " + name)
}

// sharedWorker is a Worker of a recipe whose workers share everything with
// the System: closing it leaves the shared pool or session open.
type sharedWorker func(ctx context.Context, name string) (systems.Held, error)

func (f sharedWorker) Acquire(ctx context.Context, name string) (systems.Held, error) {
	return f(ctx, name)
}
func (sharedWorker) Close() error { return nil }
