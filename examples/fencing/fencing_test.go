package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/examples/fencing"
	"github.com/monolock/monolock/go/client"
)

// interleaving is writes of holders that paused and woke up late, in the
// order they reach the resource: only a token at least the largest seen
// for its lock may write.
var interleaving = []struct {
	lock  string
	token uint64
	ok    bool
}{
	{"jobs/a", 5, true},
	{"jobs/a", 7, true},  // a newer holder
	{"jobs/a", 6, false}, // the one before it, late
	{"jobs/a", 5, false}, // the first, later still
	{"jobs/a", 7, true},  // the newest writes again
	{"jobs/b", 1, true},  // each lock name has a fence of its own
	{"jobs/a", 8, true},
	// Beyond bigint, and one apart where a double sees no difference.
	{"jobs/big", math.MaxUint64 - 1, true},
	{"jobs/big", math.MaxUint64, true},
	{"jobs/big", math.MaxUint64 - 1, false},
}

// checkInterleaving runs interleaving through write and read, the guarded
// write of a resource and what the resource holds for a lock.
func checkInterleaving(t *testing.T, write func(lock string, token uint64, value string) error, read func(lock string) string) {
	t.Helper()
	want := map[string]string{}
	for i, step := range interleaving {
		value := fmt.Sprintf("write %d with token %d", i, step.token)
		err := write(step.lock, step.token, value)
		if step.ok {
			require.NoError(t, err, "step %d: %s token %d", i, step.lock, step.token)
			want[step.lock] = value
		} else {
			require.ErrorIs(t, err, fencing.ErrStale, "step %d: %s token %d", i, step.lock, step.token)
		}
		require.Equal(t, want[step.lock], read(step.lock), "step %d: what %s's resource holds", i, step.lock)
	}
}

// staleHolder plays, with tokens from a real monolock server, what fencing
// is for: holder 1 takes the lock and has a write under way when it loses
// the lock (an operator's kick here; a pause or a partition as well).
// Holder 2 is granted the lock with a larger token and writes. Then holder
// 1's write, which no lost-lock signal can call back, arrives with the old
// token and must be refused. write is the guarded write of a resource.
func staleHolder(t *testing.T, name string, write func(token uint64, value string) error) {
	t.Helper()
	srv := startMonolock(t)
	newClient := func() *client.Client {
		c, err := client.New(client.WithServers(srv.addr), client.WithLease(5*time.Second))
		require.NoError(t, err)
		return c
	}
	holder1, err := newClient().Acquire(ctx(t), name)
	require.NoError(t, err)
	t.Cleanup(func() { holder1.Release() })

	type grant struct {
		lock *client.Lock
		err  error
	}
	granted := make(chan grant, 1)
	go func() {
		l, err := newClient().Acquire(ctx(t), name)
		granted <- grant{l, err}
	}()

	require.Equal(t, holder1.Token(), srv.kickHolder(t, name))
	select {
	case <-holder1.Done():
	case <-time.After(wait):
		t.Fatal("holder 1 not told of its loss")
	}
	require.ErrorIs(t, holder1.Err(), client.ErrLockLost)

	var holder2 *client.Lock
	select {
	case g := <-granted:
		require.NoError(t, g.err)
		holder2 = g.lock
	case <-time.After(wait):
		t.Fatal("holder 2 not granted the lock")
	}
	t.Cleanup(func() { holder2.Release() })
	require.Greater(t, holder2.Token(), holder1.Token())

	require.NoError(t, write(holder2.Token(), "from holder 2"))
	require.ErrorIs(t, write(holder1.Token(), "from holder 1"), fencing.ErrStale)
}

// -- PostgreSQL ---------------------------------------------------------------

// resourceTable is what the PostgreSQL tests guard: a value per lock.
const resourceTable = `CREATE TABLE resource (lock text PRIMARY KEY, value text NOT NULL)`

func pgResource(t *testing.T) *pgx.Conn {
	t.Helper()
	conn := connect(t, database(t))
	_, err := conn.Exec(ctx(t), resourceTable)
	require.NoError(t, err)
	return conn
}

func pgWrite(t *testing.T, conn *pgx.Conn) func(lock string, token uint64, value string) error {
	return func(lock string, token uint64, value string) error {
		return fencing.Postgres(ctx(t), conn, lock, token, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx(t), `INSERT INTO resource (lock, value) VALUES ($1, $2)
				ON CONFLICT (lock) DO UPDATE SET value = EXCLUDED.value`, lock, value)
			return err
		})
	}
}

func pgRead(t *testing.T, conn *pgx.Conn) func(lock string) string {
	return func(lock string) string {
		var value string
		err := conn.QueryRow(ctx(t), `SELECT value FROM resource WHERE lock = $1`, lock).Scan(&value)
		if !errors.Is(err, pgx.ErrNoRows) {
			require.NoError(t, err)
		}
		return value
	}
}

func TestPostgresInterleavedTokens(t *testing.T) {
	conn := pgResource(t)
	checkInterleaving(t, pgWrite(t, conn), pgRead(t, conn))

	var fence string
	require.NoError(t, conn.QueryRow(ctx(t), `SELECT token::text FROM monolock_fence WHERE name = 'jobs/big'`).Scan(&fence))
	require.Equal(t, "18446744073709551615", fence)
}

func TestPostgresStaleHolderOfARealServer(t *testing.T) {
	conn := pgResource(t)
	staleHolder(t, "jobs/pg", func(token uint64, value string) error {
		return pgWrite(t, conn)("jobs/pg", token, value)
	})
	require.Equal(t, "from holder 2", pgRead(t, conn)("jobs/pg"))
}

// A stale token aborts its whole transaction: a write made before the
// check is rolled back too, and COMMIT cannot keep it.
func TestPostgresStaleTokenRollsBackTheTransaction(t *testing.T) {
	conn := pgResource(t)
	write := pgWrite(t, conn)
	require.NoError(t, write("jobs/tx", 10, "token 10"))

	tx, err := conn.Begin(ctx(t))
	require.NoError(t, err)
	_, err = tx.Exec(ctx(t), `UPDATE resource SET value = 'token 9' WHERE lock = 'jobs/tx'`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx(t), `CALL monolock_fence('jobs/tx', 9)`)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, fencing.StaleCode, pgErr.Code)
	require.Equal(t, "stale fencing token 9 for lock jobs/tx: 10 was seen", pgErr.Message)
	require.ErrorIs(t, tx.Commit(ctx(t)), pgx.ErrTxCommitRollback)

	require.Equal(t, "token 10", pgRead(t, conn)("jobs/tx"))
}

// Two holders' transactions at once: the newer one has checked its token
// and not committed yet when the older one checks. The older waits for the
// fence's row and is refused once the newer commits.
func TestPostgresConcurrentTransactions(t *testing.T) {
	url := database(t)
	newer, older, watcher := connect(t, url), connect(t, url), connect(t, url)
	_, err := newer.Exec(ctx(t), resourceTable)
	require.NoError(t, err)
	var olderPID uint32
	require.NoError(t, older.QueryRow(ctx(t), `SELECT pg_backend_pid()`).Scan(&olderPID))

	tx, err := newer.Begin(ctx(t))
	require.NoError(t, err)
	_, err = tx.Exec(ctx(t), `CALL monolock_fence('jobs/race', 42)`)
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() { done <- pgWrite(t, older)("jobs/race", 41, "from token 41") }()
	waitFor(t, "wait of the older transaction on the fence", func() bool {
		var waiting bool
		err := watcher.QueryRow(context.Background(),
			`SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1`, olderPID).Scan(&waiting)
		require.NoError(t, err)
		return waiting
	})

	_, err = tx.Exec(ctx(t), `INSERT INTO resource (lock, value) VALUES ('jobs/race', 'from token 42')`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx(t)))
	select {
	case err := <-done:
		require.ErrorIs(t, err, fencing.ErrStale)
	case <-time.After(wait):
		t.Fatal("the older transaction still waits")
	}
	require.Equal(t, "from token 42", pgRead(t, watcher)("jobs/race"))
}

// -- Redis --------------------------------------------------------------------

func redisClient(t *testing.T) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", service(t, "redis"))})
	t.Cleanup(func() { rdb.Close() })
	// The Redis is the test run's (go test -count=N runs a test N times).
	require.NoError(t, rdb.FlushDB(ctx(t)).Err())
	return rdb
}

// redisKeys are the fence's key and the resource's of lock in test t's
// own space, with one hash tag as a Redis Cluster would need.
func redisKeys(t *testing.T, lock string) (fence, key string) {
	tag := "{" + t.Name() + "/" + lock + "}"
	return "fence:" + tag, "resource:" + tag
}

func redisWrite(t *testing.T, rdb *redis.Client) func(lock string, token uint64, value string) error {
	return func(lock string, token uint64, value string) error {
		fence, key := redisKeys(t, lock)
		return fencing.Redis(ctx(t), rdb, fence, key, token, value)
	}
}

func redisRead(t *testing.T, rdb *redis.Client) func(lock string) string {
	return func(lock string) string {
		_, key := redisKeys(t, lock)
		value, err := rdb.Get(ctx(t), key).Result()
		if !errors.Is(err, redis.Nil) {
			require.NoError(t, err)
		}
		return value
	}
}

func TestRedisInterleavedTokens(t *testing.T) {
	rdb := redisClient(t)
	checkInterleaving(t, redisWrite(t, rdb), redisRead(t, rdb))

	fence, _ := redisKeys(t, "jobs/big")
	got, err := rdb.Get(ctx(t), fence).Result()
	require.NoError(t, err)
	require.Equal(t, "18446744073709551615", got)
}

func TestRedisStaleHolderOfARealServer(t *testing.T) {
	rdb := redisClient(t)
	staleHolder(t, "jobs/redis", func(token uint64, value string) error {
		return redisWrite(t, rdb)("jobs/redis", token, value)
	})
	require.Equal(t, "from holder 2", redisRead(t, rdb)("jobs/redis"))
}

// A token that is no decimal uint64 is an error, not a write: the script
// compares decimal strings and must not be fooled by "007" or "1e3".
func TestRedisRefusesMalformedTokens(t *testing.T) {
	rdb := redisClient(t)
	fence, key := redisKeys(t, "jobs/bad")
	for _, token := range []string{"", "007", "1e3", "-1", "18446744073709551616", "123456789012345678901"} {
		err := fencing.RedisScript.Run(ctx(t), rdb, []string{fence, key}, token, "x").Err()
		require.ErrorContains(t, err, "fencing token is not a decimal uint64", "token %q", token)
	}
	require.Equal(t, int64(0), rdb.Exists(ctx(t), fence, key).Val())
}
