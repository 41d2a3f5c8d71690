package server

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/acl"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// loadACL is an Authorizer over an ACL file holding text.
func loadACL(t *testing.T, text string) *acl.Authorizer {
	t.Helper()
	path := filepath.Join(t.TempDir(), "acl")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	a, err := acl.Load(path)
	require.NoError(t, err)
	return a
}

// A watch: rule lets a client watch the names it matches and nothing
// more: the WATCH gets its snapshot, an ACQUIRE of the same name and a
// WATCH of a name outside the rule get ERROR 0x18.
func TestACLWatchOnlyRule(t *testing.T) {
	srv := startServer(t, Config{Authorizer: loadACL(t, "anonymous watch:obs/*\n")})

	w := watchName(t, srv.addr, "obs/x", 5000, 0, 0)
	head, holders, waiters := w.snapshot()
	assert.Empty(t, holders)
	assert.Empty(t, waiters)

	c := dial(t, srv.addr)
	c.acquire("obs/x", 1000)
	f := c.expectError(protocol.ErrNotAuthorized)
	assert.Contains(t, f.Reason, "no ACL rule lets anonymous take it")
	c.expectClosed()
	assert.Empty(t, srv.Locks())

	// The refused ACQUIRE never entered the table: the watcher was told
	// nothing since its snapshot.
	w.heartbeat()
	got := w.next()
	require.Equal(t, protocol.MsgWatching, got.Type, "got %v", got)
	assert.Equal(t, head.Seq, got.Seq)

	other := dial(t, srv.addr)
	frame, err := protocol.AppendWatch(nil, protocol.Watch{LeaseMS: 5000, Name: "other/x"})
	require.NoError(t, err)
	other.send(frame)
	f = other.expectError(protocol.ErrNotAuthorized)
	assert.Contains(t, f.Reason, "no ACL rule lets anonymous watch it")
	other.expectClosed()
}
