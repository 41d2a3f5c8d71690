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
	return sharedWorker(p.Acquire), nil
}

// AdvisoryKey maps a lock name to the 64-bit advisory lock key.
func AdvisoryKey(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64())
}

func (p *postgresSystem) Acquire(ctx context.Context, name string) (systems.Held, error) {
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	key := AdvisoryKey(name)
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
		// A cancelled wait leaves the session clean: the lock was not taken.
		conn.Release()
		return nil, err
	}
	return &postgresHeld{conn: conn, key: key}, nil
}

type postgresHeld struct {
	conn *pgxpool.Conn
	key  int64
}

func (h *postgresHeld) Release() error {
	_, err := h.conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", h.key)
	h.conn.Release()
	return err
}
