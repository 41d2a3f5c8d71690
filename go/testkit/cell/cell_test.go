package cell_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/testbin"
	"github.com/monolock/monolock/go/internal/testtools"
	"github.com/monolock/monolock/go/testkit/cell"
)

// The etcd side: a new leader after the leader's kill, no quorum with two
// of three members down, and a healthy cluster again once they restart.
func TestEtcdKillRestartElect(t *testing.T) {
	testtools.Require(t, "etcd")
	ctx := context.Background()
	e, err := cell.StartEtcd(ctx, cell.EtcdOptions{Dir: t.TempDir()}, 30*time.Second)
	require.NoError(t, err)
	defer e.Close()
	require.Equal(t, 3, e.Len())

	old, err := e.Leader(ctx)
	require.NoError(t, err)
	d, err := e.Elect(ctx)
	require.NoError(t, err)
	assert.Positive(t, d)
	require.True(t, e.Running(old), "Elect starts the old leader again")
	require.NoError(t, e.WaitHealthy(ctx, 30*time.Second, 0, 1, 2))

	e.Kill(0)
	e.Kill(1)
	assert.False(t, e.Running(0))
	assert.Zero(t, e.PID(0))
	assert.Error(t, e.WaitHealthy(ctx, time.Second, 2), "one member of three has no quorum")
	require.NoError(t, e.Restart(0))
	require.NoError(t, e.Restart(1))
	assert.Error(t, e.Restart(1), "a running member cannot be started twice")
	require.NoError(t, e.WaitHealthy(ctx, 30*time.Second, 0, 1, 2))
}

// The server side: one server without etcd, killed and restarted at the
// same address, and stopped by Close.
func TestSingleServerRestartsAtItsAddress(t *testing.T) {
	ctx := context.Background()
	c, err := cell.Start(ctx, cell.Options{Bin: testbin.Binary(t), Dir: t.TempDir(), Servers: 1})
	require.NoError(t, err)
	addr := c.Addrs()[0]
	assert.False(t, c.HA())
	assert.Nil(t, c.Etcd())
	i, err := c.Ready(ctx, time.Second)
	require.NoError(t, err)
	assert.Equal(t, 0, i)

	require.True(t, c.Kill(0))
	assert.False(t, c.Running(0))
	assert.False(t, c.Kill(0), "a killed server cannot be killed again")
	require.NoError(t, c.Restart(ctx, 0))
	assert.Equal(t, addr, c.Addrs()[0])
	assert.Error(t, c.Restart(ctx, 0), "a running server cannot be started twice")
	require.NoError(t, c.Close())
	assert.False(t, c.Running(0))
}

// A cell of servers without etcd is refused.
func TestStartRefusesServersWithoutEtcd(t *testing.T) {
	_, err := cell.Start(context.Background(), cell.Options{Bin: "unused", Dir: t.TempDir(), Servers: 2})
	assert.Error(t, err)
}
