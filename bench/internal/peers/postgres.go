package peers

import (
	"context"
	"hash/fnv"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/monolock/monolock/bench/internal/systems"
)

// postgresSystem is the advisory-lock recipe: take a connection from a
// pgx pool, SELECT pg_advisory_lock(key) on it (the server queues the
// waiters), and pg_advisory_unlock on the same connection before returning
// it to the pool. The lock lives as long as that server session.
type postgresSystem struct {
	pool *pgxpool.Pool
}

// OpenPostgres connects a pool of o.Pool connections to addr.
func OpenPostgres(ctx context.Context, addr string, o systems.Options) (systems.System, error) {
	cfg, err := pgxpool.ParseConfig("postgres://postgres@" + addr + "/postgres?sslmode=disable")
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(max(o.Pool, 4))
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return &postgresSystem{pool: pool}, nil
}

// PostgresPool exposes the pool to the idle-holder workload.
func PostgresPool(s systems.System) *pgxpool.Pool { return s.(*postgresSystem).pool }

func (p *postgresSystem) Name() string { return systems.Postgres }
func (p *postgresSystem) Close() error { p.pool.Close(); return nil }
func (p *postgresSystem) Worker(context.Context) (systems.Worker, error) {
	return postgresWorker{p}, nil
}

// postgresWorker shares the system's pool. Its shared claims are
// pg_advisory_lock_shared; PostgreSQL has no bounded shared lock, so it
// refuses a semaphore.
type postgresWorker struct{ p *postgresSystem }

func (w postgresWorker) Close() error { return nil }
func (w postgresWorker) Acquire(ctx context.Context, name string) (systems.Held, error) {
	return w.p.Acquire(ctx, name)
}

func (w postgresWorker) AcquireMode(ctx context.Context, name string, m systems.Mode) (systems.Held, error) {
	switch {
	case m.Limit > 0:
		return nil, systems.ErrNoSemaphore
	case m.Shared:
		return w.p.acquire(ctx, name, "SELECT pg_advisory_lock_shared($1)", "SELECT pg_advisory_unlock_shared($1)")
	}
	return w.p.Acquire(ctx, name)
}

// AdvisoryKey maps a lock name to the 64-bit advisory lock key.
func AdvisoryKey(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64())
}

func (p *postgresSystem) Acquire(ctx context.Context, name string) (systems.Held, error) {
	return p.acquire(ctx, name, "SELECT pg_advisory_lock($1)", "SELECT pg_advisory_unlock($1)")
}

// acquire runs lock on a connection of the pool and returns a Held that
// runs unlock on the same connection.
func (p *postgresSystem) acquire(ctx context.Context, name, lock, unlock string) (systems.Held, error) {
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	key := AdvisoryKey(name)
	if _, err := conn.Exec(ctx, lock, key); err != nil {
		// A cancelled wait leaves the session clean: the lock was not taken.
		conn.Release()
		return nil, err
	}
	return &postgresHeld{conn: conn, key: key, unlock: unlock}, nil
}

type postgresHeld struct {
	conn   *pgxpool.Conn
	key    int64
	unlock string
}

func (h *postgresHeld) Release() error {
	_, err := h.conn.Exec(context.Background(), h.unlock, h.key)
	h.conn.Release()
	return err
}
