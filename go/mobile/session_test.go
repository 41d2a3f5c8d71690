package monolock

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A session's locks: granted on one connection, busy is busy, an Unlock
// frees the name for another session, and Close releases what it holds
// without telling a loss.
func TestSessionAcquireTryUnlockClose(t *testing.T) {
	addr, _ := startServer(t)
	c := newTestClient(t, addr, 2000)
	first, err := c.OpenSession(int64(waitBound.Milliseconds()))
	require.NoError(t, err)
	second, err := c.OpenSession(int64(waitBound.Milliseconds()))
	require.NoError(t, err)
	defer second.Close()

	a, err := first.Acquire("mobile/session/a", int64(waitBound.Milliseconds()), nil)
	require.NoError(t, err)
	b, err := first.Acquire("mobile/session/b", int64(waitBound.Milliseconds()), nil)
	require.NoError(t, err)
	require.Greater(t, b.Token(), a.Token())
	lost := newLostRecorder()
	b.SetLostListener(lost)

	_, err = second.TryAcquire("mobile/session/a")
	require.Equal(t, KindBusy, ErrorKind(err))
	a.Unlock()
	again, err := second.TryAcquire("mobile/session/a")
	require.NoError(t, err)
	require.Greater(t, again.Token(), b.Token())

	first.Close()
	got, err := second.Acquire("mobile/session/b", int64(waitBound.Milliseconds()), nil)
	require.NoError(t, err, "Close released the session's locks")
	require.Greater(t, got.Token(), again.Token())
	lost.mu.Lock()
	defer lost.mu.Unlock()
	require.Empty(t, lost.calls, "a closed session's locks are released, not lost")
}
