package main

import (
	"context"
	"fmt"
	"log"
	"path/filepath"
	"time"

	"github.com/monolock/monolock/bench/internal/report"
	"github.com/monolock/monolock/go/client"
	"github.com/monolock/monolock/go/testkit/cell"
)

// Workload 7's cell: the TTL and lease the failover figures are for, and
// the lease of the other lock held in the runs beside a long lease.
const (
	failoverTTL       = 2 * time.Second
	failoverLease     = 2 * time.Second
	failoverLongLease = time.Minute
)

// failover measures workload 7: an HA cell's failover after kill -9 of its
// active server, and etcd's own elections on the same cluster.
func (rn *runner) failover() error {
	sec := &report.FailoverSection{TTL: failoverTTL, Lease: failoverLease, LongLease: failoverLongLease}
	rn.r.Failover = sec
	c, err := cell.Start(rn.ctx, cell.Options{Bin: rn.bin, Dir: filepath.Join(rn.work, "failover"),
		Servers: 3, Etcd: 3, EtcdTTL: failoverTTL})
	if err != nil {
		sec.Err = err.Error()
		log.Printf("failover: %v", err)
		return nil
	}
	defer c.Close()
	for i := range 2 * rn.plan.failoverRuns {
		beside := i%2 == 1 // alternate, so that both series see the same machine
		d, err := killActive(rn.ctx, c, fmt.Sprintf("failover/%d", i), beside)
		if err != nil {
			sec.Err = err.Error()
			log.Printf("failover: %v", err)
			return nil
		}
		if beside {
			sec.BesideLong = append(sec.BesideLong, d.Seconds())
		} else {
			sec.Monolock = append(sec.Monolock, d.Seconds())
		}
		log.Printf("failover   monolock run %d (beside a %v lease: %v): the waiter's grant %v after the kill",
			i, failoverLongLease, beside, d.Round(time.Millisecond))
	}
	for range rn.plan.failoverRuns {
		if d, err := c.Etcd().Elect(rn.ctx); err == nil {
			sec.Raft = append(sec.Raft, d.Seconds())
		} else {
			log.Printf("failover: etcd raft election: %v", err)
		}
		if d, err := c.Etcd().RecipeHandover(rn.ctx, failoverTTL); err == nil {
			sec.Recipe = append(sec.Recipe, d.Seconds())
		} else {
			log.Printf("failover: etcd election recipe: %v", err)
		}
	}
	log.Printf("failover   etcd raft %v, recipe %v (seconds)", sec.Raft, sec.Recipe)
	return nil
}

// killActive has a holder and a waiter on name (and, beside, a holder of
// another lock on a long lease), kills the active server with SIGKILL and
// returns the time until the waiter is granted; the killed server is
// started again before it returns.
func killActive(ctx context.Context, c *cell.Cell, name string, beside bool) (time.Duration, error) {
	if _, err := c.Ready(ctx, time.Minute); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	holder, err := client.New(client.WithServers(c.Addrs()...), client.WithLease(failoverLease))
	if err != nil {
		return 0, err
	}
	held, err := holder.Acquire(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("holder: %w", err)
	}
	defer held.Release()
	if beside {
		long, err := client.New(client.WithServers(c.Addrs()...), client.WithLease(failoverLongLease))
		if err != nil {
			return 0, err
		}
		l, err := long.Acquire(ctx, name+"/long")
		if err != nil {
			return 0, fmt.Errorf("long-lease holder: %w", err)
		}
		defer l.Release()
	}
	queued := make(chan struct{}, 1)
	waiter, err := client.New(client.WithServers(c.Addrs()...), client.WithLease(failoverLease),
		client.WithOnWaiting(func(string) {
			select {
			case queued <- struct{}{}:
			default:
			}
		}))
	if err != nil {
		return 0, err
	}
	type result struct {
		l   *client.Lock
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	go func() {
		l, err := waiter.Acquire(ctx, name)
		got <- result{l, err, time.Now()}
	}()
	select {
	case <-queued:
	case r := <-got:
		return 0, fmt.Errorf("waiter: granted while the lock was held (%v)", r.err)
	case <-ctx.Done():
		return 0, fmt.Errorf("waiter never queued: %w", ctx.Err())
	}
	active := c.Leader(ctx)
	if active < 0 {
		return 0, fmt.Errorf("no active server to kill")
	}
	c.Kill(active)
	killed := time.Now()
	r := <-got
	if r.err != nil {
		return 0, fmt.Errorf("waiter after the kill: %w", r.err)
	}
	r.l.Release()
	return r.at.Sub(killed), c.Restart(ctx, active)
}
