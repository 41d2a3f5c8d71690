package main

import (
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/admin"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// monolock kick --lock NAME kicks that lock's holder, found by name among
// neighbours whose names sort just below and above it; a lock nobody
// holds, or one the server does not know, is a clear error.
func TestKickByLockName(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("t0ken\n"), 0o600))
	p := startServe(t, nil, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--admin-token-file", tokenFile)
	env := []string{"MONOLOCK_ADMIN=" + p.admin, "MONOLOCK_ADMIN_TOKEN_FILE=" + tokenFile}
	// Neighbours by byte order: "deploy/we" and "deploy/wea" sort before
	// "deploy/web", "deploy/web\x00" and "deploy/webb" after it.
	for _, n := range []string{"deploy/we", "deploy/wea", "deploy/web\x00", "deploy/webb"} {
		c := rawDial(t, p.Addr)
		c.acquire(t, n)
		require.Equal(t, protocol.MsgAcquired, c.readType(t))
	}
	holder, waiter := rawDial(t, p.Addr), rawDial(t, p.Addr)
	holder.acquire(t, "deploy/web")
	require.Equal(t, protocol.MsgAcquired, holder.readType(t))
	waiter.acquire(t, "deploy/web")
	require.Equal(t, protocol.MsgWaiting, waiter.readType(t))

	code, stdout, stderr := command(t, env, "kick", "--lock", "deploy/web")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "kicked session 5, the holder of lock deploy/web\n", stdout)
	expectKicked(t, holder.conn)
	assert.Equal(t, protocol.MsgAcquired, waiter.readType(t), "the waiter is promoted")

	code, stdout, stderr = command(t, env, "kick", "--lock", "nobody/has/it")
	assert.Equal(t, 1, code)
	assert.Empty(t, stdout)
	assert.Equal(t, "monolock kick: lock nobody/has/it is unknown to the server: no session holds it or waits for it\n", stderr)

	code, _, stderr = command(t, env, "kick", "--lock", "deploy/web", "7")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "either session ids or --lock")
	code, _, stderr = command(t, env, "kick", "--lock", "")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "--lock: empty")
}

// A lock the server knows but nobody holds: said so, with its waiters;
// nothing is kicked.
func TestKickByLockNameNotHeld(t *testing.T) {
	waiter := admin.Session{ID: 9, LeaseMS: 1000}
	hs := httptest.NewServer(admin.Handler(admin.Config{Server: fakeServer{locks: []admin.Lock{
		heldBy("jobs/a", admin.Session{ID: 1, LeaseMS: 1000}),
		{Name: "jobs/delayed", Blocked: true, Waiters: []admin.Session{waiter}},
		{Name: "jobs/q", Waiters: []admin.Session{waiter, waiter}},
	}}}))
	t.Cleanup(hs.Close)
	code, stdout, stderr := command(t, nil, "kick", "--admin", hs.URL, "--lock", "jobs/q")
	assert.Equal(t, 1, code)
	assert.Empty(t, stdout)
	assert.Equal(t, "monolock kick: lock jobs/q is not held (2 waiting)\n", stderr)
	code, _, stderr = command(t, nil, "kick", "--admin", hs.URL, "--lock", "jobs/delayed")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "monolock kick: lock jobs/delayed is not held: it is delayed")
	code, _, stderr = command(t, nil, "kick", "--admin", hs.URL, "--lock", "jobs/b")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "lock jobs/b is unknown to the server")

	// An admin API older than paging answers every lock: still found.
	code, _, stderr = command(t, nil, "kick", "--admin", oldAdminAPI(t).URL, "--lock", "jobs/a")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "no such endpoint", "found, then the old fake refuses the kick")
}

// A lock with thousands of shared holders gets a one-line message, not
// every session id (a 5,000-holder lock printed 29 KB).
func TestSessionListIsBounded(t *testing.T) {
	assert.Equal(t, "1, 2, 3", sessionList([]uint64{1, 2, 3}, 10))
	ids := make([]uint64, 5000)
	for i := range ids {
		ids[i] = uint64(i + 1)
	}
	got := sessionList(ids, maxListedSessions)
	assert.Equal(t, "1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and 4990 more: monolock locks lists them all", got)
}

// Holders whose connections were reset are claims still: they count
// against the per-address session limit (a client that resets its
// connections in a loop fills its own limit, not the server's memory), the
// listing names them with the end of their hold, and kick --lock ends them
// only with --force (all of them with --all), after which the waiter is
// granted at once instead of at the end of their 60 s leases.
func TestResetHoldersAreBoundedListedAndKickable(t *testing.T) {
	p := startServe(t, nil, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--max-sessions-per-addr", "3")
	for range 3 {
		c := rawDial(t, p.Addr)
		c.acquireShared(t, "pool", 0)
		require.Equal(t, protocol.MsgAcquired, c.readType(t))
		require.NoError(t, c.conn.(*net.TCPConn).SetLinger(0))
		require.NoError(t, c.conn.Close()) // a reset: held back for its lease
	}
	var locks []admin.Lock
	require.Eventually(t, func() bool {
		locks = listLocks(t, p.admin, "")
		return len(locks) == 1 && len(locks[0].HeldBackHolders) == 3
	}, wait, 10*time.Millisecond, "three held-back holders listed")
	for _, h := range locks[0].HeldBackHolders {
		require.NotNil(t, h.HeldBackUntil)
		assert.WithinDuration(t, time.Now().Add(time.Minute), *h.HeldBackUntil, 10*time.Second)
	}

	code, stdout, stderr := command(t, []string{"MONOLOCK_ADMIN=" + p.admin}, "locks")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, 3, strings.Count(stdout, "held back (1m0s more)")+strings.Count(stdout, "held back (59s more)"), stdout)

	// The address's three places are taken: a fourth connection is
	// refused before any byte.
	refused := rawDial(t, p.Addr)
	_, err := refused.conn.Read(make([]byte, 1))
	require.Error(t, err, "a fourth session from the address was let in")

	env := []string{"MONOLOCK_ADMIN=" + p.admin}
	code, _, stderr = command(t, env, "kick", "--lock", "pool")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "is held only by 3 held-back holders")
	assert.Contains(t, stderr, "--force")
	code, _, stderr = command(t, env, "kick", "--lock", "pool", "--force")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "has 3 shared holders")
	code, _, stderr = command(t, env, "kick", strconv.FormatUint(locks[0].HeldBackHolders[0].ID, 10))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "is a held-back holder")

	code, stdout, stderr = command(t, env, "kick", "--lock", "pool", "--force", "--all")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, 3, strings.Count(stdout, "a held-back holder of lock pool"))
	assert.Empty(t, listLocks(t, p.admin, ""), "every held-back holder ended")
	w := rawDial(t, p.Addr)
	w.acquire(t, "pool")
	assert.Equal(t, protocol.MsgAcquired, w.readType(t), "the address's places are free again, and the lock")
}
