package client

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// A claim with a value goes as a version 3 ACQUIRE, and the server lists
// its holder with it.
func TestRealClaimWithAValue(t *testing.T) {
	srv := startRealServer(t)
	c := newClient(t, srv.Addr, 10*time.Second)
	l, err := c.Acquire(ctxTimeout(t, wait), "service/leader", Value([]byte("10.0.0.7:8080")))
	require.NoError(t, err)
	locks := srv.Server.LockListing()
	require.Len(t, locks, 1)
	require.NotNil(t, locks[0].Holder)
	assert.Equal(t, "10.0.0.7:8080", locks[0].Holder.Value)
	require.NoError(t, l.Release())
}

// The exact bytes: version 3 only when there is a value.
func TestValueSendsVersion3(t *testing.T) {
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), 10*time.Second)
	res := acquireAsync(ctxTimeout(t, wait), c, "x", false)
	conn := srv.accept()
	conn.expectAcquire("x", 10*time.Second) // no value: version 1
	conn.send(acquired(1))
	require.NoError(t, result(t, res).err)

	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctxTimeout(t, wait), "y", Value([]byte("v")), Shared(), Limit(2))
		done <- err
	}()
	conn = srv.accept()
	want, err := protocol.AppendAcquireV3(nil, "y", 10000, protocol.ModeShared, 2, []byte("v"))
	require.NoError(t, err)
	conn.expect(want)
	conn.send(errFrame(protocol.ErrUnsupportedVersion.Code, ""))
	err = <-done
	require.ErrorIs(t, err, ErrValueUnsupported, "terminal: no earlier version carries a value")
	assert.Contains(t, err.Error(), "does not support claims with a value")
}

// A value too long is refused before anything is sent.
func TestValueTooLongIsRefusedBeforeSending(t *testing.T) {
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), 10*time.Second)
	_, err := c.Acquire(ctxTimeout(t, wait), "x", Value([]byte(strings.Repeat("v", protocol.MaxValueLen+1))))
	require.ErrorIs(t, err, protocol.ErrValueTooLong)
	srv.noConnection(100 * time.Millisecond)
}

// Proclaim replaces the held lock's value on the server, keeps its token,
// and returns once the server has it.
func TestRealProclaim(t *testing.T) {
	srv := startRealServer(t)
	c := newClient(t, srv.Addr, 10*time.Second)
	ctx := ctxTimeout(t, wait)
	l, err := c.Acquire(ctx, "service/leader", Value([]byte("10.0.0.7:8080")))
	require.NoError(t, err)
	for _, v := range []string{"10.0.0.7:9090", "10.0.0.7:9191"} {
		require.NoError(t, l.Proclaim(ctx, []byte(v)))
		locks := srv.Server.LockListing()
		require.Len(t, locks, 1)
		assert.Equal(t, v, locks[0].Holder.Value, "the server has it when Proclaim returns")
		assert.Equal(t, l.Token(), locks[0].Holder.Token)
	}
	require.NoError(t, l.Err())
	require.ErrorIs(t, l.Proclaim(ctx, make([]byte, protocol.MaxValueLen+1)), protocol.ErrValueTooLong)
	require.NoError(t, l.Release())
	require.ErrorIs(t, l.Proclaim(ctx, []byte("x")), ErrReleased)

	plain, err := c.Acquire(ctx, "plain")
	require.NoError(t, err)
	assert.ErrorContains(t, plain.Proclaim(ctx, []byte("x")), "claimed without a value")
	require.NoError(t, plain.Err(), "refused before anything is sent")
	require.NoError(t, plain.Release())
}
