package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/pkg/protocol"
)

func (r *rawConn) acquireShared(t *testing.T, name string, limit uint16) {
	t.Helper()
	b, err := protocol.AppendAcquireV2(nil, name, 60000, protocol.ModeShared, limit)
	require.NoError(t, err)
	_, err = r.conn.Write(b)
	require.NoError(t, err)
}

// The listing shows a semaphore's mode, limit and every holder, the queue
// with each waiter's mode; kick --lock will not pick one of several
// shared holders.
func TestLocksListsSharedHoldersAndKickWillNotChoose(t *testing.T) {
	p := startServe(t, nil, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0")
	env := []string{"MONOLOCK_ADMIN=" + p.admin}
	for range 2 {
		c := rawDial(t, p.Addr)
		c.acquireShared(t, "pool", 2)
		require.Equal(t, protocol.MsgAcquired, c.readType(t))
	}
	shared, writer := rawDial(t, p.Addr), rawDial(t, p.Addr)
	shared.acquireShared(t, "pool", 2)
	require.Equal(t, protocol.MsgWaiting, shared.readType(t))
	writer.acquire(t, "pool")
	require.Equal(t, protocol.MsgWaiting, writer.readType(t))

	code, stdout, stderr := command(t, env, "locks")
	require.Equal(t, 0, code, stderr)
	var states []string
	for _, line := range strings.Split(stdout, "\n") {
		if f := strings.Fields(line); len(f) > 2 && (f[0] == "pool" || f[0] == "held" || f[0] == "waiting") {
			states = append(states, line)
		}
	}
	require.Len(t, states, 4, stdout)
	assert.Contains(t, states[0], "held shared (2 of 2)")
	assert.Contains(t, states[1], "held shared")
	assert.Contains(t, states[2], "waiting #1 shared")
	assert.Regexp(t, `waiting #2\s+\d`, states[3], "the writer waits exclusive")

	code, stdout, stderr = command(t, env, "locks", "--json")
	require.Equal(t, 0, code, stderr)
	var out struct {
		Locks []struct {
			Name    string `json:"name"`
			Mode    string `json:"mode"`
			Limit   *int   `json:"limit"`
			Holders []struct {
				Mode string `json:"mode"`
			} `json:"holders"`
			Waiters []struct {
				Mode string `json:"mode"`
			} `json:"waiters"`
		} `json:"locks"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &out))
	require.Len(t, out.Locks, 1)
	l := out.Locks[0]
	assert.Equal(t, "shared", l.Mode)
	require.NotNil(t, l.Limit)
	assert.Equal(t, 2, *l.Limit)
	assert.Len(t, l.Holders, 2)
	require.Len(t, l.Waiters, 2)
	assert.Equal(t, []string{"shared", "exclusive"}, []string{l.Waiters[0].Mode, l.Waiters[1].Mode})

	code, _, stderr = command(t, env, "kick", "--lock", "pool")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "has 2 shared holders (sessions 1, 2): kick one by its session id")
}
