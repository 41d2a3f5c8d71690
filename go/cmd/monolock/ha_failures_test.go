package main

// Failure scenarios of an HA cell on a real three-member etcd. Every test
// checks, through the Go client's public API and a fenced resource, that no
// two holders' validity windows overlap and that tokens strictly increase,
// and logs the failover times it measures.

import (
	"context"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/client"
	"github.com/monolock/monolock/go/internal/testbin"
	"github.com/monolock/monolock/go/internal/testetcd"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// acquired is the outcome of a background Acquire.
type acquired struct {
	lock *client.Lock
	at   time.Time
	err  error
	win  *window // the lock's validity window in the ledger, when granted
}

// onQueued returns a client option whose WAITING hook signals the channel
// it returns (at most one signal pending).
func onQueued() (client.Option, <-chan struct{}) {
	queued := make(chan struct{}, 1)
	return client.WithOnWaiting(func(string) {
		select {
		case queued <- struct{}{}:
		default:
		}
	}), queued
}

// holdAndQueue has holderClient acquire name, then waiterClient claim it
// too, each call on a goroutine that spawn starts (in a lab's namespace,
// or plainly), and returns once the waiter is queued (queued is its
// onQueued channel) and the holder has written to the fenced resource.
// The waiter's outcome arrives on the returned channel.
func holdAndQueue(t *testing.T, ctx context.Context, led *ledger, spawn func(func()) <-chan struct{},
	holderClient, waiterClient *client.Client, queued <-chan struct{}, name string,
) (holder *client.Lock, waiter <-chan acquired) {
	t.Helper()
	var holderWin *window
	var err error
	<-spawn(func() {
		holder, err = holderClient.Acquire(ctx, name)
		if err == nil {
			holderWin = led.hold(holder, "holder")
		}
	})
	require.NoError(t, err)
	outcome := make(chan acquired, 1)
	spawn(func() {
		l, err := waiterClient.Acquire(ctx, name)
		r := acquired{lock: l, at: time.Now(), err: err}
		if err == nil {
			r.win = led.hold(l, "waiter")
		}
		outcome <- r
	})
	select {
	case <-queued: // the waiter waits on the leader
	case <-time.After(wait):
		t.Fatal("the waiter was never queued")
	}
	led.write(holderWin, holder)
	return holder, outcome
}

// waitTold waits up to wait for holder to be told of its loss and returns
// when it was; failing says what.
func waitTold(t *testing.T, holder *client.Lock, failing string) time.Time {
	t.Helper()
	select {
	case <-holder.Done():
		return time.Now()
	case <-time.After(wait):
		t.Fatal(failing)
	}
	return time.Time{}
}

// goPlain runs f on a new goroutine; the returned channel closes when f
// returns.
func goPlain(f func()) <-chan struct{} {
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	return done
}

// The leader is partitioned from its clients while it still reaches etcd.
// It keeps leading; its holder loses the lock by its own timeout; no other
// server grants (a waiter whose list has the passive servers gets ERROR
// 0x01 from them and keeps waiting); once the partition heals, the waiter
// is granted by the same leader, with a larger token.
func TestHALeaderPartitionedFromClients(t *testing.T) {
	lab := newNetLab(t, 3)
	etcd := testetcd.StartCluster(t, testetcd.ClusterOptions{Netns: lab.cell, BasePort: 2379})
	a := cellMember(t, etcd.Endpoints(), lab.serverAddr(1), lab.wrapCell()...)
	a.WaitLog(0, wait, "ha: leading the cell")
	b := cellMember(t, etcd.Endpoints(), lab.serverAddr(2), lab.wrapCell()...)
	c := cellMember(t, etcd.Endpoints(), lab.serverAddr(3), lab.wrapCell()...)
	servers := []string{lab.serverAddr(1), lab.serverAddr(2), lab.serverAddr(3)}
	led := &ledger{t: t}

	var retries syncBuffer
	holderClient, err := client.New(client.WithServers(servers...), client.WithLease(time.Second))
	require.NoError(t, err)
	waiting, queued := onQueued()
	waiterClient, err := client.New(client.WithServers(servers...), client.WithLease(time.Second),
		client.WithLogger(slog.New(slog.NewTextHandler(&retries, nil))), waiting)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 4*wait)
	defer cancel()
	holder, waiter := holdAndQueue(t, ctx, led, lab.goClient, holderClient, waiterClient, queued, "part")

	cutAt := time.Now()
	lab.cut(1)
	toldAt := waitTold(t, holder, "the partitioned leader's holder was never told")
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
	assert.Contains(t, retries.String(), lab.serverAddr(1)+" (0x03)",
		"the waiter was told ERROR 0x03 by a passive server, naming the leader")

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

// The leader is partitioned from etcd (every member of three) while its
// clients still reach it. It acknowledges nothing after its own deadline,
// which comes before etcd can expire its lease, and steps down: its holder
// is told by ERROR 0x01, not by its own timeout. Another server takes over
// once etcd has expired the old leader's lease, waits out the longest lease
// and grants the waiter a larger token. Once the link is back, the old
// leader rejoins the cell as a passive server.
func TestHALeaderPartitionedFromEtcd(t *testing.T) {
	const ttl, lease = 2 * time.Second, time.Second // lab.server's --etcd-ttl; the clients' lease
	lab := newEtcdLab(t, 3)
	etcd := testetcd.StartCluster(t, testetcd.ClusterOptions{Netns: lab.etcd, ClientHost: "0.0.0.0", BasePort: 2379})
	a := lab.server(1, etcd)
	a.WaitLog(0, wait, "ha: leading the cell")
	servers := []*testbin.Server{a, lab.server(2, etcd), lab.server(3, etcd)}
	addrs := []string{lab.serverAddr(1), lab.serverAddr(2), lab.serverAddr(3)}
	// The passive servers follow the leader through etcd, over their links.
	for k := 2; k <= 3; k++ {
		require.Eventually(t, func() bool {
			reason, err := lab.probe(k)
			return err == nil && reason == addrs[0]
		}, wait, 50*time.Millisecond, "server %d never named the leader", k)
	}
	led := &ledger{t: t}

	holderClient, err := client.New(client.WithServers(addrs...), client.WithLease(lease))
	require.NoError(t, err)
	waiting, queued := onQueued()
	waiterClient, err := client.New(client.WithServers(addrs...), client.WithLease(lease), waiting)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 4*wait)
	defer cancel()
	holder, waiter := holdAndQueue(t, ctx, led, lab.goClient, holderClient, waiterClient, queued, "etcd-part")

	cutAt := time.Now()
	lab.cut(1)
	cutDone := time.Now() // no keep-alive sent after this reaches etcd

	toldAt := waitTold(t, holder, "the cut-off leader's holder was never told")
	require.ErrorIs(t, holder.Err(), client.ErrLockLost)
	var told *client.ServerError
	require.ErrorAs(t, holder.Err(), &told, "told by the server, not by its own timeout: %v", holder.Err())
	assert.Contains(t, []uint8{protocol.ErrShuttingDown.Code, protocol.ErrNotActive.Code}, told.Code)
	assert.NotContains(t, told.Reason, addrs[0], "the old leader named itself as the active server")
	// The leader's deadline is the send of its last acknowledged keep-alive
	// (before cutDone) + TTL - TTL/20, and it acknowledged nothing later:
	// the holder's last acknowledged heartbeat was sent before that, and
	// before etcd could expire the lease (its send + TTL).
	lastAck := holder.ValidUntil().Add(-lease * 8 / 10)
	assert.True(t, lastAck.Before(cutDone.Add(ttl-ttl/20)),
		"the old leader acknowledged a heartbeat sent %v after the cut, past its deadline", lastAck.Sub(cutDone))
	assert.Less(t, toldAt.Sub(cutAt), ttl+lease, "the holder was told late")
	a.WaitLog(0, wait, "ha: stepping down")
	stepAt := loggedAt(t, a, 0, "ha: stepping down")

	var next acquired
	select {
	case next = <-waiter:
	case <-time.After(3 * wait):
		t.Fatal("no grant after the leader was cut off from etcd")
	}
	require.NoError(t, next.err)
	var successor int // the server (from 1) that took over
	require.Eventually(t, func() bool {
		for k := 2; k <= 3; k++ {
			if logHas(servers[k-1], "ha: leading the cell") {
				successor = k
				return true
			}
		}
		return false
	}, wait, 20*time.Millisecond, "the waiter was granted, but no other server leads")
	tookAt := loggedAt(t, servers[successor-1], 0, "ha: leading the cell")
	m := regexp.MustCompile(`ha: leading the cell.* grace=(\S+) `).FindStringSubmatch(servers[successor-1].LogText())
	require.NotNil(t, m, "the new leader logs its grace")
	grace, err := time.ParseDuration(m[1])
	require.NoError(t, err)
	// The 1 s lease, 1024 ms on the record's grid, less what the takeover
	// took between reading the record and the log line.
	assert.LessOrEqual(t, grace, 1024*time.Millisecond)
	assert.Greater(t, grace, lease/2, "the new leader does not wait out the 1 s lease")
	assert.False(t, logHas(servers[5-successor-1], "ha: leading the cell"), "both other servers led")
	assert.Equal(t, 1, strings.Count(a.LogText(), "ha: leading the cell"), "the old leader led again without etcd")
	assert.True(t, lastAck.Before(tookAt), "the old leader acknowledged a heartbeat sent after another server took over")
	assert.True(t, toldAt.Before(next.at), "the waiter was granted before the holder was told")
	// tookAt is logged right after the takeover (milliseconds, truncated),
	// with the grace left then; the grant comes no earlier.
	assert.GreaterOrEqual(t, next.at.Sub(tookAt), grace-5*time.Millisecond,
		"the new leader granted before its grace (the longest lease) had passed")
	assert.Greater(t, next.lock.Token(), holder.Token())
	t.Logf("after the cut: holder told %v (%v), old leader stepped down %v, server %d took over %v, waiter granted %v (%v after the holder was told, %v after the takeover); tokens %d then %d",
		toldAt.Sub(cutAt).Round(time.Millisecond), told, stepAt.Sub(cutAt).Round(time.Millisecond), successor,
		tookAt.Sub(cutAt).Round(time.Millisecond), next.at.Sub(cutAt).Round(time.Millisecond),
		next.at.Sub(toldAt).Round(time.Millisecond), next.at.Sub(tookAt).Round(time.Millisecond),
		holder.Token(), next.lock.Token())

	// The link comes back: the old leader reaches etcd again and follows
	// the new leader. It names it only once it has heard from etcd (it
	// forgot the leader when it stepped down).
	healAt := time.Now()
	lab.heal(1)
	follows := addrs[successor-1]
	var reason string
	var st map[string]any
	require.Eventually(t, func() bool {
		var err error
		if reason, err = lab.probe(1); err != nil || reason != follows {
			return false
		}
		st, err = lab.cell(1)
		return err == nil
	}, 3*wait, 100*time.Millisecond, "the old leader did not rejoin as a passive server (last ERROR reason %q)", reason)
	rejoinAt := time.Now()
	assert.Equal(t, "follower", st["role"])
	assert.Equal(t, addrs[successor-1], st["leader"])
	assert.Equal(t, 1, strings.Count(a.LogText(), "ha: leading the cell"), "the old leader led again")
	assert.False(t, logHas(servers[successor-1], "ha: stepping down"), "the new leader stepped down")
	require.NoError(t, next.lock.Err(), "the waiter lost its lock when the old leader came back")
	t.Logf("after the heal: the old leader follows server %d %v later", successor, rejoinAt.Sub(healAt).Round(time.Millisecond))
	led.write(next.win, next.lock)
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

	waiting, queued := onQueued()
	cl, err := client.New(client.WithServers(addrA, addrB), client.WithLease(time.Second), waiting)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 4*wait)
	defer cancel()
	holder, waiter := holdAndQueue(t, ctx, led, goPlain, cl, cl, queued, "quorum")

	first := etcd.Leader()
	second := (first + 1) % etcd.Len()
	lostAt := time.Now()
	etcd.Kill(first)
	etcd.Kill(second)

	a.WaitLog(0, wait, "ha: stepping down")
	stepAt := time.Now()
	toldAt := waitTold(t, holder, "the holder was never told")
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
	etcd.WaitHealthy(wait, first, second)
	healedAt := time.Now()
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
	t.Logf("etcd back: healthy %v after the restart; %s granted the waiter %v after that, %v after the holder was told",
		healedAt.Sub(backAt).Round(time.Millisecond), leader, next.at.Sub(healedAt).Round(time.Millisecond),
		next.at.Sub(toldAt).Round(time.Millisecond))
	assert.True(t, toldAt.Before(backAt), "the holder was told only after etcd came back")
	// One takeover, by a server with a live etcd lease: no server that
	// campaigned on a lease lost in the outage wins and steps down at once.
	takeovers := strings.Count(a.LogText(), "ha: leading the cell") + strings.Count(b.LogText(), "ha: leading the cell")
	assert.Equal(t, 2, takeovers, "one takeover before the outage and one after it")

	// The first grant, the target TTL + grace + 1 s: a term that
	// ended in the outage has a grant waiting for the quorum or tries
	// again 0.5 s after its timeout, old election keys go as each
	// server's next term revokes them (at the latest a TTL after etcd is
	// back), then the takeover, the grace (the 1 s lease, 1024 ms on the
	// record's grid) and the client's retry onto the new leader.
	grace := 1024 * time.Millisecond
	assert.Less(t, next.at.Sub(healedAt), 2*time.Second+grace+time.Second, "the first grant after etcd healed came late")
	assert.Greater(t, next.lock.Token(), holder.Token())
	led.check()
	require.NoError(t, next.lock.Release())
}
