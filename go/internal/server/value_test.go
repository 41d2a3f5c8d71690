package server

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// lockValue returns the value the listing shows for session id of name.
func lockValue(t *testing.T, srv *testServer, name string, id uint64) string {
	t.Helper()
	for _, l := range srv.Server.LockListing() {
		if l.Name != name {
			continue
		}
		for _, s := range append(l.Holders, l.Waiters...) {
			if s.ID == id {
				return s.Value
			}
		}
	}
	t.Fatalf("no session %d on %s", id, name)
	return ""
}

// A version 3 claim carries a value that the listing shows; PROCLAIM
// replaces it while the claim holds or waits, is answered as a HEARTBEAT
// is, and changes neither the token nor the place.
func TestValueAndProclaim(t *testing.T) {
	srv := startServer(t, Config{DataDir: t.TempDir()})
	holder, waiter := dial(t, srv.addr), dial(t, srv.addr)
	frame, err := protocol.AppendAcquireV3(nil, "leader", 5000, protocol.ModeExclusive, 0, []byte("10.0.0.7:8080"))
	require.NoError(t, err)
	holder.send(frame)
	tok := holder.expectAcquired()
	frame, err = protocol.AppendAcquireV3(nil, "leader", 5000, protocol.ModeExclusive, 0, []byte("10.0.0.8:8080"))
	require.NoError(t, err)
	waiter.send(frame)
	waiter.expectWaiting()

	locks := srv.Server.LockListing()
	require.Len(t, locks, 1)
	require.Len(t, locks[0].Waiters, 1)
	holderID, waiterID := locks[0].Holder.ID, locks[0].Waiters[0].ID
	assert.Equal(t, "10.0.0.7:8080", lockValue(t, srv, "leader", holderID))
	assert.Equal(t, "10.0.0.8:8080", lockValue(t, srv, "leader", waiterID))

	proclaim, err := protocol.AppendProclaim(nil, []byte("10.0.0.7:9090"))
	require.NoError(t, err)
	holder.send(proclaim)
	assert.Equal(t, tok, holder.expectAcquired(), "the reply to a PROCLAIM, with the same token")
	assert.Equal(t, "10.0.0.7:9090", lockValue(t, srv, "leader", holderID))
	waiter.send(proclaim)
	waiter.expectWaiting()
	assert.Equal(t, "10.0.0.7:9090", lockValue(t, srv, "leader", waiterID))
	empty, err := protocol.AppendProclaim(nil, nil)
	require.NoError(t, err)
	holder.send(empty)
	holder.expectAcquired()
	assert.Empty(t, lockValue(t, srv, "leader", holderID))
}

// PROCLAIM belongs to version 3: on a version 1 or 2 connection it is an
// unknown message, and a value over 1024 bytes is refused at its length.
func TestProclaimRefusals(t *testing.T) {
	srv := startServer(t, Config{DataDir: t.TempDir()})
	v1 := dial(t, srv.addr)
	v1.acquire("a", 5000)
	v1.expectAcquired()
	proclaim, err := protocol.AppendProclaim(nil, []byte("x"))
	require.NoError(t, err)
	v1.send(proclaim)
	v1.expectError(protocol.ErrUnknownMessage)

	v3 := dial(t, srv.addr)
	frame, err := protocol.AppendAcquireV3(nil, "b", 5000, protocol.ModeExclusive, 0, []byte("x"))
	require.NoError(t, err)
	v3.send(frame)
	v3.expectAcquired()
	v3.send([]byte{protocol.MsgProclaim, 0x04, 0x01}) // 1025 bytes, none of them sent
	v3.expectError(protocol.ErrValueTooLong)

	long := dial(t, srv.addr)
	long.send(append([]byte{protocol.MsgAcquire, protocol.VersionValue, 0, 0, 0x13, 0x88, 0, 0, 0, 0, 1, 'c'}, 0x04, 0x01))
	long.expectError(protocol.ErrValueTooLong)
}
