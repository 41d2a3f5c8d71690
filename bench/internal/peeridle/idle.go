// Package peeridle holds idle locks on the peers (Redis, etcd, ZooKeeper,
// PostgreSQL), each the cheapest way its client can keep them alive, for
// package workload's idle-holder measurement (MeasureIdle).
package peeridle

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/monolock/monolock/bench/internal/peers"
	"github.com/monolock/monolock/bench/internal/workload"
)

// Redis holds n keys, each SET NX PX lease, and refreshes every one
// with the redsync extend script every lease/4 through the shared pool,
// pipelined: the cheapest way a client can keep n Redis leases alive.
func Redis(rdb *redis.Client) workload.IdleSetup {
	return func(ctx context.Context, n int, lease time.Duration) (*workload.Holders, error) {
		const batch = 500
		value := peers.RandomValue()
		key := func(i int) string { return fmt.Sprintf("idle:%d", i) }
		if err := peers.RedisExtend.Load(ctx, rdb).Err(); err != nil {
			return nil, err
		}
		_, err := workload.Parallel(ctx, (n+batch-1)/batch, 8, func(b int) error {
			_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i := b * batch; i < min(n, (b+1)*batch); i++ {
					p.SetNX(ctx, key(i), value, lease)
				}
				return nil
			})
			return err
		})
		if err != nil {
			return nil, err
		}
		var beats, lost atomic.Int64
		hctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		const shards = 8
		for s := range shards {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for hctx.Err() == nil {
					round := time.Now()
					for b := s; b*batch < n; b += shards {
						cmds, _ := rdb.Pipelined(hctx, func(p redis.Pipeliner) error {
							for i := b * batch; i < min(n, (b+1)*batch); i++ {
								peers.RedisExtend.EvalSha(hctx, p, []string{key(i)}, value, lease.Milliseconds())
							}
							return nil
						})
						for _, c := range cmds {
							if v, err := c.(*redis.Cmd).Int(); err != nil || v != 1 {
								lost.Add(1)
							} else {
								beats.Add(1)
							}
						}
					}
					workload.SleepCtx(hctx, time.Until(round.Add(lease/4)))
				}
			}()
		}
		return workload.NewHolders(n, &beats, &lost, func() {
			stop()
			wg.Wait()
			rdb.FlushDB(context.Background())
		}), nil
	}
}

// Etcd holds n locks the way concurrency.Session does: one lease per
// holder with a key attached, kept alive by the client's KeepAlive (one
// gRPC stream for all leases, a refresh every TTL/3).
func Etcd(cli *clientv3.Client) workload.IdleSetup {
	return func(ctx context.Context, n int, lease time.Duration) (*workload.Holders, error) {
		hctx, stop := context.WithCancel(context.Background())
		var drain sync.WaitGroup
		ttl := int64(peers.EtcdTTL(lease))
		ok, err := workload.Parallel(ctx, n, 32, func(i int) error {
			g, err := cli.Grant(ctx, ttl)
			if err != nil {
				return err
			}
			if _, err := cli.Put(ctx, fmt.Sprintf("/idle/%d", i), "", clientv3.WithLease(g.ID)); err != nil {
				return err
			}
			ch, err := cli.KeepAlive(hctx, g.ID)
			if err != nil {
				return err
			}
			drain.Add(1)
			go func() {
				defer drain.Done()
				for range ch {
				}
			}()
			return nil
		})
		closeAll := func() {
			stop()
			drain.Wait()
			cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, _ = cli.Delete(cctx, "/idle/", clientv3.WithPrefix())
		}
		if ok < n {
			closeAll()
			return nil, fmt.Errorf("%d of %d etcd holders established: %w", ok, n, err)
		}
		return workload.NewHolders(ok, nil, nil, closeAll), nil
	}
}

// ZooKeeper holds n locks, one ZooKeeper session each (session timeout
// = lease) with an ephemeral node; the client library pings the session.
func ZooKeeper(addr string) workload.IdleSetup {
	return func(ctx context.Context, n int, lease time.Duration) (*workload.Holders, error) {
		conns := make([]*zk.Conn, n)
		ok, err := workload.Parallel(ctx, n, 32, func(i int) error {
			c, err := peers.DialZooKeeper(ctx, addr, lease)
			if err != nil {
				return err
			}
			conns[i] = c
			_, err = c.Create(fmt.Sprintf("/idle-%d", i), nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
			return err
		})
		closeAll := func() {
			for _, c := range conns {
				if c != nil {
					c.Close()
				}
			}
		}
		if ok < n {
			closeAll()
			return nil, fmt.Errorf("%d of %d zookeeper holders established: %w", ok, n, err)
		}
		return workload.NewHolders(ok, nil, nil, closeAll), nil
	}
}

// Postgres holds n advisory locks, one server connection each (the
// lock lives in the session, so each holder needs its own backend).
func Postgres(addr string) workload.IdleSetup {
	return func(ctx context.Context, n int, lease time.Duration) (*workload.Holders, error) {
		conns := make([]*pgx.Conn, n)
		ok, err := workload.Parallel(ctx, n, 16, func(i int) error {
			c, err := pgx.Connect(ctx, "postgres://postgres@"+addr+"/postgres?sslmode=disable")
			if err != nil {
				return err
			}
			conns[i] = c
			_, err = c.Exec(ctx, "SELECT pg_advisory_lock($1)", peers.AdvisoryKey(fmt.Sprintf("idle/%d", i)))
			return err
		})
		closeAll := func() {
			for _, c := range conns {
				if c != nil {
					c.Close(context.Background())
				}
			}
		}
		if ok < n {
			closeAll()
			return nil, fmt.Errorf("%d of %d postgres holders established: %w", ok, n, err)
		}
		return workload.NewHolders(ok, nil, nil, closeAll), nil
	}
}
