package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/admin"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// evilName is a lock name any client may take: it would turn the
// operator's terminal red, set its title and forge a table line.
const evilName = "evil\x1b[31mRED\x1b]0;pwned\x07\r\nFAKE-LINE"

// assertNoControls fails if out has a control byte other than the line
// feeds between lines.
func assertNoControls(t *testing.T, out string) {
	t.Helper()
	for _, c := range []string{"\x1b", "\x07", "\r"} {
		assert.NotContains(t, out, c, "raw control byte %q in %q", c, out)
	}
	assert.NotContains(t, out, "\nFAKE-LINE", "a forged line in %q", out)
}

// Text from clients stays text in the operator's terminal: monolock locks
// and monolock kick escape it (shown quoted, as Go strings), --json keeps
// it exact, and the server's log quotes it.
func TestUntrustedNamesStayText(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("t0ken\n"), 0o600))
	p := startServe(t, nil, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--admin-token-file", tokenFile, "--log-level", "debug")
	env := []string{"MONOLOCK_ADMIN=" + p.admin, "MONOLOCK_ADMIN_TOKEN_FILE=" + tokenFile}
	holder := rawDial(t, p.Addr)
	holder.acquire(t, evilName)
	require.Equal(t, protocol.MsgAcquired, holder.readType(t))
	waiter := rawDial(t, p.Addr) // promoted by the kick: the server logs the name
	waiter.acquire(t, evilName)
	require.Equal(t, protocol.MsgWaiting, waiter.readType(t))
	plain := rawDial(t, p.Addr)
	plain.acquire(t, "jobs/plain é")
	require.Equal(t, protocol.MsgAcquired, plain.readType(t))

	code, stdout, stderr := command(t, env, "locks")
	require.Equal(t, 0, code, stderr)
	assertNoControls(t, stdout)
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	require.Len(t, lines, 4, "header, holder, waiter, the other lock: %q", stdout)
	assert.Regexp(t, `^"evil\\x1b\[31mRED\\x1b\]0;pwned\\a\\r\\nFAKE-LINE"\s+held\s+1\s`, lines[1])
	assert.Regexp(t, `^\s+waiting #1\s+2\s`, lines[2])
	assert.Regexp(t, `^"jobs/plain é"\s+held\s+3\s`, lines[3], "a space is quoted")

	code, stdout, stderr = command(t, env, "locks", "--json")
	require.Equal(t, 0, code, stderr)
	var out struct{ Locks []admin.Lock }
	require.NoError(t, json.Unmarshal([]byte(stdout), &out))
	require.Len(t, out.Locks, 2)
	assert.Equal(t, evilName, out.Locks[0].Name, "--json is exact")

	code, stdout, stderr = command(t, env, "kick", "--lock", evilName)
	require.Equal(t, 0, code, stderr)
	assertNoControls(t, stdout)
	assert.Equal(t, `kicked session 1, the holder of lock "evil\x1b[31mRED\x1b]0;pwned\a\r\nFAKE-LINE"`+"\n", stdout)
	assert.Contains(t, p.waitLog(`msg=promoted`), `lock="evil\x1b[31mRED\x1b]0;pwned\a\r\nFAKE-LINE"`, "the server's log quotes it")
	code, stdout, stderr = command(t, env, "kick", "--lock", evilName)
	require.Equal(t, 0, code, stderr)
	assert.True(t, strings.HasPrefix(stdout, "kicked session 2, "), stdout)
	code, _, stderr = command(t, env, "kick", "--lock", evilName)
	assert.Equal(t, 1, code)
	assertNoControls(t, stderr)
	assert.Contains(t, stderr, `lock "evil\x1b[31mRED`)

	for _, line := range p.Log() {
		assertNoControls(t, line)
	}
}
