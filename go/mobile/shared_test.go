package monolock

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Shared claims and semaphores through the binding's own methods: readers
// together, a writer busy while they hold, a semaphore's last permit, and
// the kinds and codes of its refusals.
func TestSharedAndSemaphoreClaims(t *testing.T) {
	addr, _ := startServer(t)
	c := newTestClient(t, addr, 10000)

	r1, err := c.AcquireShared("rw", 5000, nil)
	require.NoError(t, err)
	r2, err := c.TryAcquireShared("rw")
	require.NoError(t, err, "readers hold together")
	require.Greater(t, r2.Token(), r1.Token())
	_, err = c.TryAcquire("rw")
	require.Equal(t, KindBusy, ErrorKind(err), "a writer does not fit beside readers")
	r1.Unlock()
	r2.Unlock()
	w, err := c.TryAcquire("rw")
	require.NoError(t, err)
	w.Unlock()

	var held []*Lock
	for range 2 {
		l, err := c.AcquireSemaphore("pool", 2, 5000, nil)
		require.NoError(t, err)
		held = append(held, l)
	}
	_, err = c.TryAcquireSemaphore("pool", 2)
	require.Equal(t, KindBusy, ErrorKind(err), "no third permit")
	_, err = c.TryAcquireSemaphore("pool", 3)
	require.Equal(t, KindServer, ErrorKind(err))
	require.Equal(t, 0x1a, ErrorCode(err), "limits must agree")
	_, err = c.AcquireSemaphore("pool", 0, 5000, nil)
	require.Equal(t, KindValidation, ErrorKind(err))
	require.Equal(t, 0x19, ErrorCode(err))
	for _, l := range held {
		l.Unlock()
	}
}
