package peers

import (
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/monolock/monolock/bench/internal/systems"
)

// The redsync recipe, written out: SET key token NX PX ttl to acquire,
// retried after a random 50-250 ms delay while the key exists (redsync's
// default retry delay), and a compare-and-delete script to release, so a
// holder whose key expired cannot delete its successor's.
const (
	redisMinRetry = 50 * time.Millisecond
	redisMaxRetry = 250 * time.Millisecond
)

var (
	redisRelease = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) else return 0 end`)
	// RedisExtend is redsync's Extend: push the expiry out if we still hold the key.
	RedisExtend = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("PEXPIRE", KEYS[1], ARGV[2]) else return 0 end`)
)

type redisSystem struct {
	rdb *redis.Client
	o   systems.Options
}

// OpenRedis connects a go-redis pool to addr.
func OpenRedis(ctx context.Context, addr string, o systems.Options) (systems.System, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: max(o.Pool, 16)})
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, err
	}
	return &redisSystem{rdb: rdb, o: o}, nil
}

// RedisClient exposes the pool to the idle-holder workload.
func RedisClient(s systems.System) *redis.Client { return s.(*redisSystem).rdb }

func (r *redisSystem) Name() string { return systems.Redis }
func (r *redisSystem) Close() error { return r.rdb.Close() }
func (r *redisSystem) Worker(context.Context) (systems.Worker, error) {
	return sharedWorker(r.Acquire), nil
}

// RandomValue is the per-grant secret that makes release safe.
func RandomValue() string {
	var b [16]byte
	_, _ = crand.Read(b[:])
	return base64.RawStdEncoding.EncodeToString(b[:])
}

func (r *redisSystem) Acquire(ctx context.Context, name string) (systems.Held, error) {
	key := "lock:" + name
	value := RandomValue()
	for {
		ok, err := r.rdb.SetNX(ctx, key, value, r.o.Lease).Result()
		if err != nil {
			return nil, err
		}
		if ok {
			h := &redisHeld{r: r, key: key, value: value}
			if r.o.KeepAlive {
				h.startExtending()
			}
			return h, nil
		}
		delay := redisMinRetry + rand.N(redisMaxRetry-redisMinRetry)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(delay):
		}
	}
}

type redisHeld struct {
	r          *redisSystem
	key, value string
	stop       chan struct{}
	done       sync.WaitGroup
}

// startExtending refreshes the TTL every lease/4, as a holder that wants
// to keep its lock must (the same cadence as monolock's heartbeats).
func (h *redisHeld) startExtending() {
	h.stop = make(chan struct{})
	h.done.Add(1)
	go func() {
		defer h.done.Done()
		t := time.NewTicker(h.r.o.Lease / 4)
		defer t.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-t.C:
				RedisExtend.Run(context.Background(), h.r.rdb, []string{h.key}, h.value, h.r.o.Lease.Milliseconds())
			}
		}
	}()
}

func (h *redisHeld) Release() error {
	if h.stop != nil {
		close(h.stop)
		h.done.Wait()
	}
	return redisRelease.Run(context.Background(), h.r.rdb, []string{h.key}, h.value).Err()
}
