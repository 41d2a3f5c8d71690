// Package fencing holds the fencing recipes of docs/fencing.md as code that
// runs: a PostgreSQL fence (fence.sql) and a Redis script (fence.lua), each
// of which refuses a write whose fencing token is smaller than the largest
// it has seen for the lock. Its tests run them against real servers, with
// tokens from a real monolock server.
package fencing

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"
)

// ErrStale says that the resource has seen a larger token for the lock
// than the one the write came with: a newer holder has written, and this
// write was refused.
var ErrStale = errors.New("fencing: stale token: a newer holder has written")

// Schema is fence.sql: the table monolock_fence and the procedure of the
// same name. Run it once in the database whose writes it guards.
//
//go:embed fence.sql
var Schema string

// StaleCode is the SQLSTATE that monolock_fence raises for a stale token.
const StaleCode = "ML001"

// DB is what Postgres needs of a database: *pgx.Conn and *pgxpool.Pool
// are ones.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Postgres runs write in a transaction of db that starts with
// CALL monolock_fence(name, token): the transaction commits only if token
// is at least the largest seen for name. Otherwise it is rolled back
// without calling write, and the error matches ErrStale. An error of write
// rolls it back too.
func Postgres(ctx context.Context, db DB, name string, token uint64, write func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		// A uint64 in decimal: bigint cannot hold every token.
		_, err := tx.Exec(ctx, "CALL monolock_fence($1, $2)", name, strconv.FormatUint(token, 10))
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == StaleCode {
			return fmt.Errorf("%w (%s)", ErrStale, pgErr.Message)
		}
		if err != nil {
			return err
		}
		return write(tx)
	})
}

//go:embed fence.lua
var fenceLua string

// RedisScript is fence.lua, run by EVALSHA (EVAL the first time).
var RedisScript = redis.NewScript(fenceLua)

// Redis sets key to value if token is at least the largest token recorded
// in fenceKey, and records token there, in one step (RedisScript).
// Otherwise it writes nothing and returns ErrStale. In a Redis Cluster,
// both keys must hash to one slot: give them the same {hash tag}.
func Redis(ctx context.Context, rdb redis.Scripter, fenceKey, key string, token uint64, value string) error {
	wrote, err := RedisScript.Run(ctx, rdb, []string{fenceKey, key}, strconv.FormatUint(token, 10), value).Int()
	if err != nil {
		return err
	}
	if wrote == 0 {
		return ErrStale
	}
	return nil
}
