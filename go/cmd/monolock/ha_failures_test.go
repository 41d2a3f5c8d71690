package main

// Failure scenarios of an HA cell on a real three-member etcd. Every test
// checks, through the Go client's public API and a fenced resource, that no
// two holders' validity windows overlap and that tokens strictly increase,
// and logs the failover times it measures.

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/client"
	"github.com/monolock/monolock/go/internal/testetcd"
)

// acquired is the outcome of a background Acquire.
type acquired struct {
	lock *client.Lock
	at   time.Time
	err  error
}

// The leader is partitioned from its clients while it still reaches etcd.
// It keeps leading; its holder loses the lock by its own timeout; no other
// server grants (a waiter whose list has the passive servers gets ERROR
// 0x01 from them and keeps waiting); once the partition heals, the waiter
// is granted by the same leader, with a larger token.
func TestHALeaderPartitionedFromClients(t *testing.T) {
	lab := newNetLab(t, 3)
	etcd := testetcd.StartCluster(t, testetcd.ClusterOptions{Wrap: lab.wrapCell()})
	a := cellMember(t, etcd.Endpoints(), lab.serverAddr(1), lab.wrapCell()...)
	a.WaitLog(0, wait, "ha: leading the cell")
	b := cellMember(t, etcd.Endpoints(), lab.serverAddr(2), lab.wrapCell()...)
	c := cellMember(t, etcd.Endpoints(), lab.serverAddr(3), lab.wrapCell()...)
	servers := []string{lab.serverAddr(1), lab.serverAddr(2), lab.serverAddr(3)}
	led := &ledger{t: t}

	var retries syncBuffer
	holderClient, err := client.New(client.WithServers(servers...), client.WithLease(time.Second))
	require.NoError(t, err)
	queued := make(chan struct{}, 1)
	waiterClient, err := client.New(client.WithServers(servers...), client.WithLease(time.Second),
		client.WithLogger(slog.New(slog.NewTextHandler(&retries, nil))),
		client.WithOnWaiting(func(string) {
			select {
			case queued <- struct{}{}:
			default:
			}
		}))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 4*wait)
	defer cancel()

	var holder *client.Lock
	var holderWin *window
	<-lab.goClient(func() {
		holder, err = holderClient.Acquire(ctx, "part")
		if err == nil {
			holderWin = led.hold(holder, "holder")
		}
	})
	require.NoError(t, err)
	waiter := make(chan acquired, 1)
	lab.goClient(func() {
		l, err := waiterClient.Acquire(ctx, "part")
		r := acquired{lock: l, at: time.Now(), err: err}
		if err == nil {
			led.hold(l, "waiter")
		}
		waiter <- r
	})
	select {
	case <-queued: // the waiter waits on the leader
	case <-time.After(wait):
		t.Fatal("the waiter was never queued")
	}
	led.write(holderWin, holder)

	cutAt := time.Now()
	lab.cut(1)
	var toldAt time.Time
	select {
	case <-holder.Done():
		toldAt = time.Now()
	case <-time.After(wait):
		t.Fatal("the partitioned leader's holder was never told")
	}
	require.ErrorIs(t, holder.Err(), client.ErrLockLost)
	assert.ErrorIs(t, holder.Err(), client.ErrClientTimeout, "lost by its own timeout")
	t.Logf("holder told %v after the cut (lease 1s: its own timeout)", toldAt.Sub(cutAt).Round(time.Millisecond))

	// The partition lasts well past the etcd TTL plus the longest lease:
	// were the leader to lose its term, another server would have granted
	// by then. Nobody may grant meanwhile.
	partition := 5 * time.Second
	select {
	case r := <-waiter:
		t.Fatalf("granted during the partition (token %d, err %v)", r.lock.Token(), r.err)
	case <-time.After(time.Until(cutAt.Add(partition))):
	}
	assert.False(t, logHas(a, "ha: stepping down"), "the leader stepped down although it still reached etcd")
	assert.False(t, logHas(b, "ha: leading the cell"), "a passive server took over")
	assert.False(t, logHas(c, "ha: leading the cell"), "a passive server took over")
	assert.Contains(t, retries.String(), "not the active server; the active server is "+lab.serverAddr(1),
		"the waiter was told ERROR 0x01 by a passive server")

	healAt := time.Now()
	lab.heal(1)
	var next acquired
	select {
	case next = <-waiter:
	case <-time.After(3 * wait):
		t.Fatal("no grant after the partition healed")
	}
	require.NoError(t, next.err)
	t.Logf("after the heal, the waiter was granted in %v; %v after the holder was told (partition %v)",
		next.at.Sub(healAt).Round(time.Millisecond), next.at.Sub(toldAt).Round(time.Millisecond), partition)
	assert.Greater(t, next.lock.Token(), holder.Token())
	assert.False(t, logHas(a, "ha: stepping down"), "the leader stepped down")
	assert.False(t, logHas(b, "ha: leading the cell") || logHas(c, "ha: leading the cell"), "a passive server took over")
	led.check()
	require.NoError(t, next.lock.Release())
}

// One etcd member of three, etcd's own leader, is killed with -9 while two
// workers take turns on a lock. The cell keeps granting; whether the
// monolock leader steps down (a keep-alive can fail during etcd's election)
// or not, no two validity windows overlap and tokens keep rising.
func TestHAOneEtcdMemberLost(t *testing.T) {
	etcd := testetcd.StartCluster(t, testetcd.ClusterOptions{})
	addrA, addrB := testetcd.FreePort(t), testetcd.FreePort(t)
	a := cellMember(t, etcd.Endpoints(), addrA)
	a.WaitLog(0, wait, "ha: leading the cell")
	b := cellMember(t, etcd.Endpoints(), addrB)
	led := &ledger{t: t}

	var mu sync.Mutex
	var grants []time.Time
	stop := make(chan struct{})
	var workers sync.WaitGroup
	for i := range 2 {
		cl, err := client.New(client.WithServers(addrA, addrB), client.WithLease(time.Second))
		require.NoError(t, err)
		who := []string{"worker 1", "worker 2"}[i]
		workers.Add(1)
		go func() {
			defer workers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
				l, err := cl.Acquire(ctx, "member")
				cancel()
				if err != nil {
					t.Errorf("%s: %v", who, err)
					return
				}
				w := led.hold(l, who)
				mu.Lock()
				grants = append(grants, w.start)
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
				led.write(w, l)
				led.release(w, l)
			}
		}()
	}
	countSince := func(from time.Time) (n int) {
		mu.Lock()
		defer mu.Unlock()
		for _, g := range grants {
			if !g.Before(from) {
				n++
			}
		}
		return n
	}
	require.Eventually(t, func() bool { return countSince(time.Time{}) >= 5 }, wait, 20*time.Millisecond)

	victim := etcd.Leader()
	killedAt := time.Now()
	etcd.Kill(victim)
	// Run until a few seconds (more than the TTL) have passed and grants
	// have gone on after the kill.
	require.Eventually(t, func() bool {
		return time.Since(killedAt) > 4*time.Second && countSince(killedAt.Add(3*time.Second)) >= 3
	}, 3*wait, 50*time.Millisecond, "grants did not go on after an etcd member was killed")
	close(stop)
	workers.Wait()

	mu.Lock()
	var longest time.Duration
	prev := killedAt
	for _, g := range grants {
		if g.After(killedAt) {
			longest = max(longest, g.Sub(prev))
			prev = g
		}
	}
	mu.Unlock()
	stepped := logHas(a, "ha: stepping down")
	t.Logf("killed etcd's leader (member %d): %d grants in the %v after, the longest time without a grant %v; monolock leader stepped down: %v, other server took over: %v",
		victim, countSince(killedAt), time.Since(killedAt).Round(time.Millisecond), longest.Round(time.Millisecond),
		stepped, logHas(b, "ha: leading the cell"))
	wins := led.check()
	t.Logf("%d grants in all, tokens %d..%d", len(wins), wins[0].token, wins[len(wins)-1].token)
}

// etcd loses its quorum (two members of three killed with -9). The leader
// steps down at its deadline; the holder is told; nobody is granted
// anything while etcd is down; once the members are back with their data, a
// leader is elected and the waiter is granted a larger token.
func TestHAEtcdQuorumLost(t *testing.T) {
	etcd := testetcd.StartCluster(t, testetcd.ClusterOptions{})
	addrA, addrB := testetcd.FreePort(t), testetcd.FreePort(t)
	a := cellMember(t, etcd.Endpoints(), addrA)
	a.WaitLog(0, wait, "ha: leading the cell")
	b := cellMember(t, etcd.Endpoints(), addrB)
	led := &ledger{t: t}

	queued := make(chan struct{}, 1)
	cl, err := client.New(client.WithServers(addrA, addrB), client.WithLease(time.Second),
		client.WithOnWaiting(func(string) {
			select {
			case queued <- struct{}{}:
			default:
			}
		}))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 4*wait)
	defer cancel()
	holder, err := cl.Acquire(ctx, "quorum")
	require.NoError(t, err)
	holderWin := led.hold(holder, "holder")
	waiter := make(chan acquired, 1)
	go func() {
		l, err := cl.Acquire(ctx, "quorum")
		r := acquired{lock: l, at: time.Now(), err: err}
		if err == nil {
			led.hold(l, "waiter")
		}
		waiter <- r
	}()
	select {
	case <-queued:
	case <-time.After(wait):
		t.Fatal("the waiter was never queued")
	}
	led.write(holderWin, holder)

	first := etcd.Leader()
	second := (first + 1) % etcd.Len()
	lostAt := time.Now()
	etcd.Kill(first)
	etcd.Kill(second)

	a.WaitLog(0, wait, "ha: stepping down")
	stepAt := time.Now()
	var toldAt time.Time
	select {
	case <-holder.Done():
		toldAt = time.Now()
	case <-time.After(wait):
		t.Fatal("the holder was never told")
	}
	require.ErrorIs(t, holder.Err(), client.ErrLockLost)
	assert.NotContains(t, holder.Err().Error(), "the active server is "+addrA, "the old leader named itself as the active server")
	t.Logf("quorum lost: the leader stepped down %v later (TTL 2s), the holder was told after %v (%v)",
		stepAt.Sub(lostAt).Round(time.Millisecond), toldAt.Sub(lostAt).Round(time.Millisecond), holder.Err())

	// etcd stays down well past the TTL and the longest lease: nothing may
	// be granted meanwhile, by any server.
	outage := 5 * time.Second
	select {
	case r := <-waiter:
		t.Fatalf("granted without etcd (token %d, err %v)", r.lock.Token(), r.err)
	case <-time.After(time.Until(lostAt.Add(outage))):
	}
	assert.Equal(t, 1, strings.Count(a.LogText(), "ha: leading the cell"), "the old leader led again without etcd")
	assert.False(t, logHas(b, "ha: leading the cell"), "the other server led without etcd")

	backAt := time.Now()
	etcd.Restart(first)
	etcd.Restart(second)
	var next acquired
	select {
	case next = <-waiter:
	case <-time.After(3 * wait):
		t.Fatal("no grant after etcd came back")
	}
	require.NoError(t, next.err)
	leader := "the old leader"
	if logHas(b, "ha: leading the cell") {
		leader = "the other server"
	}
	t.Logf("etcd back: %s granted the waiter %v after the restart, %v after the holder was told",
		leader, next.at.Sub(backAt).Round(time.Millisecond), next.at.Sub(toldAt).Round(time.Millisecond))
	assert.True(t, toldAt.Before(backAt), "the holder was told only after etcd came back")
	assert.Greater(t, next.lock.Token(), holder.Token())
	led.check()
	require.NoError(t, next.lock.Release())
}
