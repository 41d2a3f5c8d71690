package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/client"
	"github.com/monolock/monolock/go/internal/testbin"
	"github.com/monolock/monolock/go/internal/testetcd"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// cellServer starts one `monolock serve` of an HA cell on etcd, listening on
// (and advertising) listen, with a 2 s etcd TTL; admin is its admin address
// or "off".
func cellServer(t *testing.T, etcd, listen string, admin ...string) *testbin.Server {
	t.Helper()
	adminAddr := "off"
	if len(admin) > 0 {
		adminAddr = admin[0]
	}
	cmd := exec.Command(binary, "serve", "--data-dir", t.TempDir(), "--listen", listen,
		"--advertise", listen, "--admin", adminAddr,
		"--etcd", etcd, "--etcd-prefix", "/test-cell/", "--etcd-ttl", "2s")
	cmd.Env = cleanEnv()
	return testbin.Start(t, wait, cmd)
}

// rawAcquire sends an ACQUIRE on a new connection and returns it.
func rawAcquire(t *testing.T, addr, name string, leaseMS uint32) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, wait)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	frame, err := protocol.AppendAcquire(nil, name, leaseMS)
	require.NoError(t, err)
	_, err = c.Write(frame)
	require.NoError(t, err)
	return c
}

// readFrame reads one server frame: its type, and the token or the ERROR's
// code and reason.
func readFrame(t *testing.T, c net.Conn, d time.Duration) (typ uint8, token uint64, code uint8, reason string, err error) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	var b [1]byte
	if _, err = io.ReadFull(c, b[:]); err != nil {
		return 0, 0, 0, "", err
	}
	switch b[0] {
	case protocol.MsgAcquired:
		token, err = protocol.ReadAcquiredBody(c)
	case protocol.MsgError:
		code, reason, err = protocol.ReadErrorBody(c)
	}
	return b[0], token, code, reason, err
}

// The leader is killed with -9: its holder hears at once, the waiter moves
// to the passive server, which takes over once the leader's etcd lease has
// expired, waits out the longest lease the cell acknowledged, and grants a
// larger token.
func TestHAFailoverOnKill(t *testing.T) {
	etcd := testetcd.Start(t)
	addrA, addrB := testetcd.FreePort(t), testetcd.FreePort(t)
	a := cellServer(t, etcd, addrA)
	a.WaitLog(0, wait, "ha: leading the cell")
	adminB := testetcd.FreePort(t)
	b := cellServer(t, etcd, addrB, adminB)

	// The passive server sends clients to the active one, by name once it
	// has learnt it from etcd.
	require.Eventually(t, func() bool {
		probe := rawAcquire(t, addrB, "x", 1000)
		typ, _, code, reason, err := readFrame(t, probe, wait)
		require.NoError(t, err)
		require.Equal(t, protocol.MsgError, typ)
		require.Equal(t, protocol.ErrShuttingDown.Code, code)
		return reason == "not the active server; the active server is "+addrA
	}, wait, 50*time.Millisecond)

	assert.Equal(t, map[string]any{"role": "follower", "leader": addrA, "grace_remaining_ms": 0.0}, cellStatus(t, adminB))

	c, err := client.New(client.WithServers(addrB, addrA), client.WithLease(time.Second))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	defer cancel()
	lock, err := c.Acquire(ctx, "x")
	require.NoError(t, err, "the client moves from the passive server to the active one")
	waiter := make(chan *client.Lock, 1)
	go func() {
		l, err := c.Acquire(ctx, "x")
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		waiter <- l
	}()
	time.Sleep(300 * time.Millisecond) // the waiter queues on A

	killed := time.Now()
	require.NoError(t, a.Cmd.Process.Kill())
	select {
	case <-lock.Done():
	case <-time.After(wait):
		t.Fatal("the holder did not hear that its server died")
	}
	require.ErrorIs(t, lock.Err(), client.ErrLockLost)
	var next *client.Lock
	select {
	case next = <-waiter:
	case <-time.After(2 * wait):
		t.Fatal("no grant after the failover")
	}
	require.NotNil(t, next)
	failover := time.Since(killed)
	t.Logf("failover: %v from kill -9 to the next grant (etcd TTL 2s, longest lease 1s)", failover)
	assert.Greater(t, next.Token(), lock.Token(), "tokens never go back across a failover")
	assert.GreaterOrEqual(t, failover, time.Second, "granted before the longest lease had passed")
	b.WaitLog(0, wait, "ha: leading the cell")
	st := cellStatus(t, adminB)
	assert.Equal(t, "leader", st["role"])
	assert.Equal(t, addrB, st["leader"])
	require.NoError(t, next.Release())
}

// cellStatus reads GET /v1/cell from an admin address.
func cellStatus(t *testing.T, admin string) map[string]any {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/v1/cell")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var st map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	return st
}

// The leader is paused (SIGSTOP) for longer than its etcd lease. When it
// resumes it must send nothing that extends a claim: the heartbeat that
// waited in its socket gets ERROR 0x01, never an ACQUIRED.
func TestHAPausedLeaderSendsNothingAfterResume(t *testing.T) {
	etcd := testetcd.Start(t)
	addrA, addrB := testetcd.FreePort(t), testetcd.FreePort(t)
	a := cellServer(t, etcd, addrA)
	a.WaitLog(0, wait, "ha: leading the cell")
	b := cellServer(t, etcd, addrB)

	holder := rawAcquire(t, addrA, "p", 10000)
	granted, _, _, _, err := readFrame(t, holder, wait)
	require.NoError(t, err)
	require.Equal(t, protocol.MsgAcquired, granted)

	require.NoError(t, a.Cmd.Process.Signal(syscall.SIGSTOP))
	b.WaitLog(0, wait, "ha: leading the cell") // A's etcd lease has expired
	_, err = holder.Write([]byte{protocol.MsgHeartbeat})
	require.NoError(t, err)
	require.NoError(t, a.Cmd.Process.Signal(syscall.SIGCONT))

	typ, _, code, _, err := readFrame(t, holder, wait)
	if err == nil {
		require.Equal(t, protocol.MsgError, typ, "a resumed leader acknowledged a heartbeat")
		assert.Equal(t, protocol.ErrShuttingDown.Code, code)
	} else {
		require.True(t, errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET), "got %v", err)
	}
}

// cutProxy forwards TCP connections to target until cut, then swallows
// everything in both directions (the connections stay open, as in a
// partition): a server's link to etcd, cut without touching its clients.
type cutProxy struct {
	ln     net.Listener
	target string
	cut    atomic.Bool
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &cutProxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			t.Cleanup(func() { c.Close(); u.Close() })
			go p.pipe(c, u)
			go p.pipe(u, c)
		}
	}()
	return p
}

func (p *cutProxy) pipe(from, to net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if err != nil {
			return
		}
		if !p.cut.Load() {
			if _, err := to.Write(buf[:n]); err != nil {
				return
			}
		}
	}
}

// The leader is cut off from etcd while its clients still reach it. It
// stops acknowledging on its own clock, so its holder is told of the loss
// before the other server, elected once etcd expires the old leader's
// lease and done with its grace, grants the lock to the waiter.
func TestHALeaderCutOffFromEtcd(t *testing.T) {
	etcd := testetcd.Start(t)
	proxy := newCutProxy(t, etcd)
	addrA, addrB := testetcd.FreePort(t), testetcd.FreePort(t)
	a := cellServer(t, proxy.ln.Addr().String(), addrA)
	a.WaitLog(0, wait, "ha: leading the cell")
	b := cellServer(t, etcd, addrB)

	c, err := client.New(client.WithServers(addrA, addrB), client.WithLease(time.Second))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 3*wait)
	defer cancel()
	holder, err := c.Acquire(ctx, "cut")
	require.NoError(t, err)
	told := make(chan time.Time, 1)
	go func() { <-holder.Done(); told <- time.Now() }()
	granted := make(chan time.Time, 1)
	go func() {
		l, err := c.Acquire(ctx, "cut")
		if err != nil {
			t.Errorf("waiter: %v", err)
			granted <- time.Time{}
			return
		}
		granted <- time.Now()
		defer l.Release()
		assert.Greater(t, l.Token(), holder.Token())
	}()
	time.Sleep(300 * time.Millisecond) // the waiter queues on A

	proxy.cut.Store(true)
	var toldAt, grantedAt time.Time
	select {
	case toldAt = <-told:
	case <-time.After(2 * wait):
		t.Fatal("the cut-off leader's holder was never told")
	}
	select {
	case grantedAt = <-granted:
	case <-time.After(3 * wait):
		t.Fatal("no grant after the leader was cut off")
	}
	require.False(t, grantedAt.IsZero())
	b.WaitLog(0, wait, "ha: leading the cell")
	margin := grantedAt.Sub(toldAt)
	t.Logf("holder told %v before the waiter's grant (holder: %v)", margin, holder.Err())
	assert.Greater(t, margin, time.Duration(0), "the waiter was granted before the holder was told")
}

// monolock locks against both servers of a cell shows each one's role and
// the active server; after a failover the new leader shows its grace.
func TestHALocksShowsRoleLeaderAndGrace(t *testing.T) {
	etcd := testetcd.Start(t)
	addrA, addrB := testetcd.FreePort(t), testetcd.FreePort(t)
	adminA, adminB := testetcd.FreePort(t), testetcd.FreePort(t)
	a := cellServer(t, etcd, addrA, adminA)
	a.WaitLog(0, wait, "ha: leading the cell")
	require.Equal(t, adminA, a.AdminAddr, "ready with its admin API")
	// A 30 s lease, written to etcd before it is acknowledged: whoever
	// takes over from A waits 30 s before it grants (the test does not).
	holder := rawAcquire(t, addrA, "jobs/x", 30000)
	typ, _, _, _, err := readFrame(t, holder, wait)
	require.NoError(t, err)
	require.Equal(t, protocol.MsgAcquired, typ)
	b := cellServer(t, etcd, addrB, adminB)
	require.Equal(t, adminB, b.AdminAddr, "ready with its admin API")

	type locksJSON struct {
		Locks []struct {
			Name string `json:"name"`
		} `json:"locks"`
		Cell map[string]any `json:"cell"`
	}
	locksOf := func(admin string) locksJSON {
		t.Helper()
		code, stdout, stderr := command(t, nil, "locks", "--admin", admin, "--json")
		require.Equal(t, 0, code, stderr)
		assert.Empty(t, stderr)
		var out locksJSON
		require.NoError(t, json.Unmarshal([]byte(stdout), &out), stdout)
		return out
	}
	// B learns the leader from etcd shortly after it starts.
	require.Eventually(t, func() bool { return locksOf(adminB).Cell["leader"] == addrA }, wait, 100*time.Millisecond)

	code, stdout, stderr := command(t, nil, "locks", "--admin", adminA)
	require.Equal(t, 0, code, stderr)
	lines := strings.Split(stdout, "\n")
	require.GreaterOrEqual(t, len(lines), 4, stdout)
	assert.Equal(t, "role: active  leader: "+addrA+"  grace: none left, granting", lines[0],
		"the first leader of a new cell has no lease to wait out")
	assert.Empty(t, lines[1])
	assert.Regexp(t, `^LOCK\s+STATE`, lines[2])
	assert.Regexp(t, `^jobs/x\s+held\s`, lines[3])
	outA := locksOf(adminA)
	assert.Equal(t, map[string]any{"mode": "ha", "role": "leader", "leader": addrA, "grace_remaining_ms": 0.0, "error": ""}, outA.Cell)
	require.Len(t, outA.Locks, 1)
	assert.Equal(t, "jobs/x", outA.Locks[0].Name)

	code, stdout, stderr = command(t, nil, "locks", "--admin", adminB)
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "role: passive  leader: "+addrA+"  (the active server lists the locks)\n\nno locks\n", stdout)
	assert.Equal(t, map[string]any{"mode": "ha", "role": "follower", "leader": addrA, "grace_remaining_ms": 0.0, "error": ""}, locksOf(adminB).Cell)

	// A dies; B takes over once A's etcd lease (2 s) has expired, and waits
	// out the 30 s lease A acknowledged before it grants.
	require.NoError(t, a.Cmd.Process.Kill())
	var cell map[string]any
	require.Eventually(t, func() bool {
		cell = locksOf(adminB).Cell
		return cell["role"] == "leader"
	}, 2*wait, 100*time.Millisecond)
	assert.Equal(t, addrB, cell["leader"])
	grace, _ := cell["grace_remaining_ms"].(float64)
	assert.Greater(t, grace, 0.0, "B just took over: its grace runs")
	assert.LessOrEqual(t, grace, 30000.0)
	code, stdout, stderr = command(t, nil, "locks", "--admin", adminB)
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `^role: active  leader: `+regexp.QuoteMeta(addrB)+`  grace: \d+\.\d s left, new claims wait\n\nno locks\n$`, stdout)
}
