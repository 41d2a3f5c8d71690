package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/client"
	"github.com/monolock/monolock/go/internal/admin"
	"github.com/monolock/monolock/go/internal/testbin"
	"github.com/monolock/monolock/go/internal/testcerts"
	"github.com/monolock/monolock/go/internal/tokenstore"
	"github.com/monolock/monolock/go/pkg/protocol"
	"github.com/monolock/monolock/go/testkit/launch"
)

// wait turns a hang into a failure; it is never reached when things work.
const wait = 15 * time.Second

// binary is the monolock command built from this source for the tests.
var binary string

func TestMain(m *testing.M) {
	// Always this source, never $MONOLOCK_BIN: these tests are the command's own.
	os.Exit(testbin.Run(m, testbin.Build, &binary))
}

// command runs monolock to completion and returns its exit status and
// output.
func command(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(cleanEnv(), env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("running monolock %v: %v", args, err)
	}
	return code, out.String(), errb.String()
}

// cleanEnv is the test's environment without MONOLOCK_ settings, so that
// the caller's shell cannot change what a test checks.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MONOLOCK_") {
			env = append(env, kv)
		}
	}
	return env
}

// serverProc is a running monolock serve.
type serverProc struct {
	*testbin.Server
	t     *testing.T
	admin string // admin API address, "" when off
}

// startServe starts monolock serve with args (plus a fresh --data-dir) and
// waits until it is ready: its lock port and admin API (unless off) listen.
func startServe(t *testing.T, env []string, args ...string) *serverProc {
	t.Helper()
	args = append([]string{"serve", "--data-dir", t.TempDir()}, args...)
	cmd := exec.Command(binary, args...)
	cmd.Env = append(cleanEnv(), env...)
	p := &serverProc{Server: testbin.Start(t, wait, cmd), t: t}
	// Runs before testbin's kill: a graceful stop first.
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.Exited():
		case <-time.After(wait):
		}
	})
	p.admin = p.AdminAddr
	return p
}

// waitLog returns the first log line containing any of subs, waiting for it.
func (p *serverProc) waitLog(subs ...string) string {
	p.t.Helper()
	return p.waitLogFrom(0, subs...)
}

// waitLogFrom is waitLog over the lines from index from on.
func (p *serverProc) waitLogFrom(from int, subs ...string) string {
	p.t.Helper()
	return p.WaitLog(from, wait, subs...)
}

// signal sends sig and waits for the log line that shows it was handled.
func (p *serverProc) signal(sig os.Signal, logged ...string) string {
	p.t.Helper()
	n := len(p.Log())
	require.NoError(p.t, p.Cmd.Process.Signal(sig))
	return p.waitLogFrom(n, logged...)
}

// One clear line and exit status 2 for every bad flag, value or file.
func TestBadConfigGivesOneLineAndStatus2(t *testing.T) {
	dir := t.TempDir()
	badACL := filepath.Join(dir, "bad.acl")
	require.NoError(t, os.WriteFile(badACL, []byte("cn:ok jobs/*\nwho-knows jobs/*\n"), 0o600))
	notPEM := filepath.Join(dir, "junk.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("junk"), 0o600))
	ca := testcerts.NewCA(t, "ca")
	cert, key := ca.Issue(t, testcerts.Spec{CN: "server", Server: true}).Write(t, dir, "server")

	cases := []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"serve", "--no-such-flag"}, "flag provided but not defined"},
		{nil, []string{"serve", "extra"}, `unexpected argument "extra"`},
		{nil, []string{"serve", "--max-sessions", "-1"}, "must not be negative"},
		{nil, []string{"serve", "--max-sessions-per-addr-ipv6-prefix", "0"}, "--max-sessions-per-addr-ipv6-prefix must be 1 to 128, got 0"},
		{nil, []string{"serve", "--max-sessions-per-addr-ipv6-prefix", "129"}, "--max-sessions-per-addr-ipv6-prefix must be 1 to 128, got 129"},
		{nil, []string{"serve", "--handshake-timeout", "0s"}, "--handshake-timeout must be positive"},
		{nil, []string{"serve", "--listen", "nonsense"}, `--listen "nonsense"`},
		{nil, []string{"serve", "--log-format", "xml"}, `--log-format "xml": want text or json`},
		{nil, []string{"serve", "--acl", filepath.Join(dir, "missing.acl")}, "missing.acl: no such file"},
		{nil, []string{"serve", "--acl", badACL}, `bad.acl: line 2: identity "who-knows"`},
		{nil, []string{"serve", "--tls-cert", cert}, "TLS needs both --tls-cert and --tls-key"},
		{nil, []string{"serve", "--tls-cert", cert, "--tls-key", notPEM}, "junk.pem"},
		{nil, []string{"serve", "--tls-cert", cert, "--tls-key", key, "--tls-client-ca", notPEM}, "no PEM certificate"},
		{nil, []string{"serve", "--admin", "0.0.0.0:7118"}, "refusing to serve the admin API on non-loopback 0.0.0.0:7118"},
		{nil, []string{"serve", "--admin-tls"}, "--admin-tls needs --tls-cert"},
		{nil, []string{"serve", "--etcd", "127.0.0.1:2379", "--etcd-ca", notPEM}, "etcd client TLS (--etcd-ca, --etcd-cert, --etcd-key): " + notPEM + ": no PEM certificate in it"},
		{nil, []string{"serve", "--etcd", "127.0.0.1:2379", "--etcd-cert", cert}, "needs both --etcd-cert and --etcd-key"},
		{nil, []string{"serve", "--admin-max-connections", "0"}, "--admin-max-connections must be 1 to 32 (it is counted in the 64 file descriptors --max-sessions leaves), got 0"},
		{[]string{"MONOLOCK_ADMIN_MAX_CONNECTIONS=33"}, []string{"serve"}, "--admin-max-connections must be 1 to 32"},
		{nil, []string{"serve", "--ready-file", filepath.Join(dir, "missing", "ready.json")}, "missing: no such file"},
		{nil, []string{"serve", "--ready-file", dir}, "is a directory"},
		{[]string{"MONOLOCK_MAX_SESSIONS=lots"}, []string{"serve"}, `invalid value "lots" for MONOLOCK_MAX_SESSIONS`},
		{[]string{"MONOLOCK_LOCK_DELAY=-1s"}, []string{"serve"}, "--lock-delay must not be negative"},
		{nil, []string{"locks", "--nope"}, "flag provided but not defined"},
		{nil, []string{"kick"}, "no session id given"},
		{nil, []string{"kick", "abc"}, `session id "abc" is not a number`},
	}
	for _, c := range cases {
		code, stdout, stderr := command(t, c.env, append(c.args, "--check-config")...)
		if c.args[0] != "serve" {
			code, stdout, stderr = command(t, c.env, c.args...)
		}
		assert.Equal(t, 2, code, "%v: status", c.args)
		assert.Empty(t, stdout, "%v", c.args)
		assert.Equal(t, 1, strings.Count(stderr, "\n"), "%v: want one line, got %q", c.args, stderr)
		assert.Contains(t, stderr, c.want, "%v", c.args)
	}
}

func TestCheckConfigAcceptsGoodFiles(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "ca")
	cert, key := ca.Issue(t, testcerts.Spec{CN: "server", Server: true}).Write(t, dir, "server")
	aclPath := filepath.Join(dir, "acl")
	require.NoError(t, os.WriteFile(aclPath, []byte("cn:ci ci/*\n"), 0o600))
	tokenFile := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600))
	code, stdout, stderr := command(t, []string{"MONOLOCK_ACL=" + aclPath},
		"serve", "--check-config", "--data-dir", filepath.Join(dir, "data"),
		"--tls-cert", cert, "--tls-key", key, "--tls-client-ca", ca.Write(t, dir, "ca"),
		"--admin", "0.0.0.0:7118", "--admin-token-file", tokenFile, "--max-sessions", "7")
	assert.Equal(t, 0, code, stderr)
	assert.Equal(t, fmt.Sprintf(`monolock serve: configuration OK
  listen      127.0.0.1:7117 (mutual TLS, client CA %s)
  acl         %s (1 rule)
  admin       0.0.0.0:7118 (tls false, token true)
  data dir    %s
  sessions    max 7, per address 0 (0: no limit)
`, filepath.Join(dir, "ca.crt"), aclPath, filepath.Join(dir, "data")), stdout)
	_, err := os.Stat(filepath.Join(dir, "data"))
	assert.True(t, os.IsNotExist(err), "--check-config creates nothing")
}

// --check-config finds what the start would refuse (a used data
// directory without its token mark or lease record, a FIFO or a device
// where a file belongs) and says so at once, with status 2, where it said
// OK (or blocked forever) before; beside a running server on the same
// data directory it says OK.
func TestCheckConfigFindsWhatTheStartWouldRefuse(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	first := exec.Command(binary, "serve", "--data-dir", data, "--listen", "127.0.0.1:0", "--admin", "off")
	first.Env = cleanEnv()
	p := testbin.Start(t, wait, first)
	code, stdout, stderr := command(t, nil, "serve", "--check-config", "--data-dir", data)
	assert.Equal(t, 0, code, "beside the running server: %s", stderr)
	assert.Contains(t, stdout, "configuration OK")
	require.NoError(t, first.Process.Signal(syscall.SIGTERM))
	<-p.Exited()

	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--acl", fifo}, "is a FIFO, not a regular file"},
		{[]string{"--admin-token-file", "/dev/zero"}, "is a device, not a regular file"},
	} {
		code, _, stderr := command(t, nil, append([]string{"serve", "--check-config", "--data-dir", data}, c.args...)...)
		assert.Equal(t, 2, code, "%v: %s", c.args, stderr)
		assert.Contains(t, stderr, c.want)
	}

	for _, lost := range []struct{ file, want string }{
		{"leases", "is missing (or a link to nothing) in a data directory that a server has used"},
		{"token-hwm", "has been used, but its token high-water mark"},
	} {
		path := filepath.Join(data, lost.file)
		saved, err := os.ReadFile(path)
		require.NoError(t, err)
		require.NoError(t, os.Remove(path))
		code, stdout, stderr := command(t, nil, "serve", "--check-config", "--data-dir", data)
		assert.Equal(t, 2, code, "without %s: %s", lost.file, stdout)
		assert.Contains(t, stderr, lost.want)
		require.NoError(t, os.WriteFile(path, saved, 0o600))
	}
}

// Environment variables set flags; the command line wins over them.
func TestEnvironmentSetsFlags(t *testing.T) {
	p := startServe(t, []string{"MONOLOCK_LISTEN=127.0.0.1:0", "MONOLOCK_ADMIN=off", "MONOLOCK_MAX_SESSIONS=1",
		"MONOLOCK_LOG_LEVEL=debug"})
	assert.Empty(t, p.admin, "MONOLOCK_ADMIN=off")
	first := rawDial(t, p.Addr)
	first.acquire(t, "x")
	assert.Equal(t, protocol.MsgAcquired, first.readType(t))
	over := rawDial(t, p.Addr)
	over.acquire(t, "y")
	_, err := over.conn.Read(make([]byte, 1))
	assert.Error(t, err, "over MONOLOCK_MAX_SESSIONS: closed before any reply")

	// The Go client treats the refusal as temporary: it retries until a
	// place is free.
	c, err := client.New(client.WithServers(p.Addr), client.WithLease(10*time.Second))
	require.NoError(t, err)
	got := make(chan error, 1)
	seen := len(p.Log())
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		l, err := c.Acquire(ctx, "y")
		if err == nil {
			_ = l.Release()
		}
		got <- err
	}()
	p.waitLogFrom(seen, `msg="connection refused"`) // the client was turned away at least once
	first.conn.Close()
	assert.NoError(t, <-got)

	q := startServe(t, []string{"MONOLOCK_ADMIN=off"}, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0")
	assert.NotEmpty(t, q.admin, "--admin overrides MONOLOCK_ADMIN")
}

// An admin address given explicitly must be free.
func TestExplicitAdminAddressInUseFails(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	code, _, stderr := command(t, nil, "serve", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--admin", busy.Addr().String())
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, `msg="cannot listen for the admin API"`)
}

type rawConn struct{ conn net.Conn }

func rawDial(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, wait)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	require.NoError(t, c.SetDeadline(time.Now().Add(wait)))
	return &rawConn{c}
}

func (r *rawConn) acquire(t *testing.T, name string) {
	t.Helper()
	b, err := protocol.AppendAcquire(nil, name, 60000)
	require.NoError(t, err)
	_, err = r.conn.Write(b)
	require.NoError(t, err)
}

func (r *rawConn) readType(t *testing.T) uint8 {
	t.Helper()
	var b [1]byte
	_, err := io.ReadFull(r.conn, b[:])
	require.NoError(t, err)
	if b[0] == protocol.MsgAcquired {
		_, err = protocol.ReadAcquiredBody(r.conn)
		require.NoError(t, err)
	}
	return b[0]
}

// tlsClient returns a Go client for addr presenting cert (none if nil).
func tlsClient(t *testing.T, addr string, ca *testcerts.CA, cert *tls.Certificate) *client.Client {
	t.Helper()
	cfg := &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	c, err := client.New(client.WithServers(addr), client.WithLease(10*time.Second), client.WithTLS(cfg))
	require.NoError(t, err)
	return c
}

// acquireCode acquires name and returns the server's error code, or 0 with
// the lock on success.
func acquireCode(t *testing.T, c *client.Client, name string) (uint8, *client.Lock) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	l, err := c.Acquire(ctx, name)
	if err == nil {
		t.Cleanup(func() { _ = l.Release() })
		return 0, l
	}
	var se *client.ServerError
	require.True(t, errors.As(err, &se), "acquire %q: %v", name, err)
	return se.Code, nil
}

// Mutual TLS refuses a client without a certificate; the ACL answers 0x18
// to identities it does not allow; SIGHUP swaps the rules for new sessions
// only, and a bad file on SIGHUP keeps the rules in force.
func TestMutualTLSAndACLReload(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "monolock test CA")
	cert, key := ca.Issue(t, testcerts.Spec{CN: "server", Server: true}).Write(t, dir, "server")
	aclPath := filepath.Join(dir, "acl")
	require.NoError(t, os.WriteFile(aclPath, []byte("cn:alice jobs/*\n"), 0o600))
	caFile := ca.Write(t, dir, "ca")
	p := startServe(t, nil, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--admin-tls",
		"--tls-cert", cert, "--tls-key", key, "--tls-client-ca", caFile, "--acl", aclPath)

	// No certificate: the handshake fails, no frame ever arrives.
	raw, err := net.DialTimeout("tcp", p.Addr, wait)
	require.NoError(t, err)
	defer raw.Close()
	require.NoError(t, raw.SetDeadline(time.Now().Add(wait)))
	tc := tls.Client(raw, &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"})
	acq, err := protocol.AppendAcquire(nil, "jobs/1", 60000)
	require.NoError(t, err)
	_, werr := tc.Write(acq) // TLS 1.3: the client's handshake may succeed ...
	n, rerr := tc.Read(make([]byte, 16))
	assert.Zero(t, n)
	assert.True(t, werr != nil || rerr != nil, "... but the server refuses the session")
	if rerr != nil {
		assert.NotErrorIs(t, rerr, os.ErrDeadlineExceeded, "refused at once, not left hanging")
	}
	p.waitLog(`msg="TLS handshake failed"`)

	alice := ca.Issue(t, testcerts.Spec{CN: "alice"}).TLS
	bob := ca.Issue(t, testcerts.Spec{CN: "bob", URIs: []string{"spiffe://example.org/bob"}}).TLS
	aliceC, bobC := tlsClient(t, p.Addr, ca, &alice), tlsClient(t, p.Addr, ca, &bob)

	code, held := acquireCode(t, aliceC, "jobs/1")
	require.Zero(t, code)
	assert.Equal(t, uint64(1), held.Token())
	code, _ = acquireCode(t, aliceC, "other/1")
	assert.Equal(t, protocol.ErrNotAuthorized.Code, code, "name outside alice's patterns")
	code, _ = acquireCode(t, bobC, "jobs/2")
	assert.Equal(t, protocol.ErrNotAuthorized.Code, code, "bob is not in the ACL")

	// New rules: bob's SPIFFE ID in, alice out.
	require.NoError(t, os.WriteFile(aclPath, []byte("uri:spiffe://example.org/* jobs/*\n"), 0o600))
	p.signal(syscall.SIGHUP, `msg="ACL reloaded"`)
	code, _ = acquireCode(t, bobC, "jobs/2")
	assert.Zero(t, code, "bob is allowed after the reload")
	code, _ = acquireCode(t, aliceC, "jobs/3")
	assert.Equal(t, protocol.ErrNotAuthorized.Code, code, "alice's new sessions are denied")
	assert.NoError(t, held.Err(), "alice's existing session keeps its lock")

	// A bad file is rejected with a clear message; the rules in force stay.
	require.NoError(t, os.WriteFile(aclPath, []byte("uri:spiffe://example.org/* jobs/*\nbroken\n"), 0o600))
	line := p.signal(syscall.SIGHUP, "reload failed")
	assert.Contains(t, line, "line 2")
	code, _ = acquireCode(t, bobC, "jobs/4")
	assert.Zero(t, code, "the previous rules still apply")

	// The admin listing (over HTTPS) names the identities.
	status, _, stderr := command(t, nil, "locks", "--admin", p.admin)
	assert.Equal(t, 1, status, "plain HTTP to an HTTPS admin API fails")
	assert.Contains(t, stderr, "admin API")
	status, stdout, stderr := command(t, nil, "locks", "--json", "--admin", p.admin, "--admin-ca", caFile)
	require.Equal(t, 0, status, stderr)
	var resp admin.LocksResponse
	require.NoError(t, json.Unmarshal([]byte(stdout), &resp))
	ids := map[string]string{}
	for _, l := range resp.Locks {
		require.NotNil(t, l.Holder, l.Name)
		ids[l.Name] = l.Holder.Identity
	}
	assert.Equal(t, map[string]string{"jobs/1": "cn:alice", "jobs/2": "uri:spiffe://example.org/bob",
		"jobs/4": "uri:spiffe://example.org/bob"}, ids)
	assert.NoError(t, held.Err(), "still held after all reloads")
}

// monolock locks prints holder and waiters in order; monolock kick ends the
// holder with 0x02 and the first waiter gets the lock.
func TestLocksAndKickCommands(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("t0ken\n"), 0o600))
	p := startServe(t, nil, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--admin-token-file", tokenFile)
	holder, first, second := rawDial(t, p.Addr), rawDial(t, p.Addr), rawDial(t, p.Addr)
	holder.acquire(t, "deploy/web")
	require.Equal(t, protocol.MsgAcquired, holder.readType(t))
	first.acquire(t, "deploy/web")
	require.Equal(t, protocol.MsgWaiting, first.readType(t))
	second.acquire(t, "deploy/web")
	require.Equal(t, protocol.MsgWaiting, second.readType(t))

	code, _, stderr := command(t, nil, "locks", "--admin", p.admin)
	assert.Equal(t, 1, code, "no token: refused")
	assert.Contains(t, stderr, "bearer token")

	env := []string{"MONOLOCK_ADMIN=" + p.admin, "MONOLOCK_ADMIN_TOKEN_FILE=" + tokenFile}
	code, stdout, stderr := command(t, env, "locks")
	require.Equal(t, 0, code, stderr)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 4, stdout)
	assert.Regexp(t, `^LOCK\s+STATE\s+SESSION\s+TOKEN\s+IDENTITY\s+REMOTE\s+LEASE\s+FOR$`, lines[0])
	assert.Regexp(t, `^deploy/web\s+held\s+1\s+1\s+anonymous\s+`+regexp.QuoteMeta(holder.conn.LocalAddr().String())+`\s+1m0s\s`, lines[1])
	assert.Regexp(t, `^\s+waiting #1\s+2\s+-\s+anonymous\s+`+regexp.QuoteMeta(first.conn.LocalAddr().String()), lines[2])
	assert.Regexp(t, `^\s+waiting #2\s+3\s+-\s+anonymous\s+`+regexp.QuoteMeta(second.conn.LocalAddr().String()), lines[3])

	code, stdout, stderr = command(t, env, "kick", "1")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "kicked session 1\n", stdout)
	expectKicked(t, holder.conn)
	assert.Equal(t, protocol.MsgAcquired, first.readType(t), "the first waiter is promoted")

	code, _, stderr = command(t, env, "kick", "1")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "no session 1")
}

// SIGTERM: every session gets ERROR 0x01, the process exits 0.
func TestSIGTERMShutsDownGracefully(t *testing.T) {
	p := startServe(t, nil, "--listen", "127.0.0.1:0", "--admin", "off", "--drain-timeout", "5s")
	c := rawDial(t, p.Addr)
	c.acquire(t, "x")
	require.Equal(t, protocol.MsgAcquired, c.readType(t))
	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, protocol.MsgError, c.readType(t))
	errCode, _, err := protocol.ReadErrorBody(c.conn)
	require.NoError(t, err)
	assert.Equal(t, protocol.ErrShuttingDown.Code, errCode)
	c.conn.Close()
	select {
	case <-p.Exited():
	case <-time.After(wait):
		t.Fatal("server did not exit")
	}
	assert.Equal(t, 0, p.ExitCode())
	p.waitLog("msg=stopped")
}

// A used data directory whose token-hwm was deleted refuses to start, with
// a message that says what to do; --token-floor starts it again.
func TestDeletedTokenMarkRefusesToStart(t *testing.T) {
	dir := t.TempDir()
	first := exec.Command(binary, "serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--admin", "off")
	first.Env = cleanEnv()
	p := testbin.Start(t, wait, first)
	p.WaitLog(0, wait, `msg="admin API off"`)
	require.NoError(t, first.Process.Signal(syscall.SIGTERM))
	<-p.Exited()
	require.NoError(t, os.Remove(filepath.Join(dir, "token-hwm")))

	code, _, stderr := command(t, nil, "serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--admin", "off")
	assert.NotZero(t, code)
	assert.Contains(t, stderr, "has been used")
	assert.Contains(t, stderr, "--token-floor")

	again := exec.Command(binary, "serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--admin", "off", "--token-floor", "1000000")
	again.Env = cleanEnv()
	p = testbin.Start(t, wait, again)
	p.WaitLog(0, wait, `msg="admin API off"`)
	mark, err := os.ReadFile(filepath.Join(dir, "token-hwm"))
	require.NoError(t, err)
	assert.Contains(t, string(mark), fmt.Sprintf("\n%d\n", 1000000+tokenstore.DefaultBlockSize), "the first block starts above the floor")
	require.NoError(t, again.Process.Signal(syscall.SIGTERM))
	<-p.Exited()
}

// A crash while a holder's 30 s lease runs, and the lease record is then
// removed, or replaced by a link to nothing: the next server refuses to
// start, where it granted the lock to the next claim at once before; the
// record that the message says to write starts it again.
func TestMissingLeaseRecordRefusesToStart(t *testing.T) {
	dir := t.TempDir()
	first := exec.Command(binary, "serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--admin", "off")
	first.Env = cleanEnv()
	p := testbin.Start(t, wait, first)
	c, err := client.New(client.WithServers(p.LockAddr), client.WithLease(30*time.Second))
	require.NoError(t, err)
	lock, err := c.Acquire(context.Background(), "jobs/held")
	require.NoError(t, err)
	defer lock.Release()
	require.NoError(t, first.Process.Kill())
	<-p.Exited()
	record := filepath.Join(dir, "leases")

	for _, lose := range []func() error{
		func() error { return os.Remove(record) },
		func() error { return os.Symlink(filepath.Join(dir, "nowhere"), record) },
	} {
		require.NoError(t, lose())
		code, _, stderr := command(t, nil, "serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--admin", "off")
		assert.NotZero(t, code)
		assert.Contains(t, stderr, "is missing (or a link to nothing) in a data directory that a server has used: refusing to start")
		_ = os.Remove(record)
	}

	require.NoError(t, os.WriteFile(record, []byte("monolock lease record v1\n"), 0o600))
	again := exec.Command(binary, "serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--admin", "off")
	again.Env = cleanEnv()
	p = testbin.Start(t, wait, again)
	p.WaitLog(0, wait, `msg="admin API off"`)
	require.NoError(t, again.Process.Signal(syscall.SIGTERM))
	<-p.Exited()
}

// The reader of the server's stderr goes away (`monolock serve 2>&1 |
// logger`, and logger dies): the server keeps serving, and a held lock is
// kept.
func TestClosedStderrKeepsServing(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	readyFile := filepath.Join(t.TempDir(), "ready.json")
	cmd := exec.Command(binary, "serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--admin", "off",
		"--ready-file", readyFile)
	cmd.Env = cleanEnv()
	cmd.Stderr = w
	require.NoError(t, cmd.Start())
	w.Close()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ready, err := launch.WaitFile(context.Background(), readyFile, wait, nil)
	require.NoError(t, err)
	holder, err := net.Dial("tcp", ready.LockAddr)
	require.NoError(t, err)
	defer holder.Close()
	frame, err := protocol.AppendAcquire(nil, "kept", 60000)
	require.NoError(t, err)
	_, err = holder.Write(frame)
	require.NoError(t, err)
	reply := make([]byte, 9)
	_, err = io.ReadFull(holder, reply)
	require.NoError(t, err)
	require.Equal(t, protocol.MsgAcquired, reply[0])

	r.Close()                                              // the log reader is gone
	require.NoError(t, cmd.Process.Signal(syscall.SIGHUP)) // makes the server log
	time.Sleep(200 * time.Millisecond)
	other, err := net.Dial("tcp", ready.LockAddr)
	require.NoError(t, err, "the server died with its log reader")
	defer other.Close()
	frame, _ = protocol.AppendAcquire(nil, "kept", 60000)
	_, err = other.Write(frame)
	require.NoError(t, err)
	_, err = io.ReadFull(other, reply[:1])
	require.NoError(t, err)
	assert.Equal(t, protocol.MsgWaiting, reply[0], "the holder still has its lock")
}

func TestMaxSessionsFor(t *testing.T) {
	assert.Equal(t, 960, maxSessionsFor(1024))
	assert.Equal(t, 1048512, maxSessionsFor(1048576))
	assert.Equal(t, 1, maxSessionsFor(64), "at least one")
	assert.Equal(t, 1, maxSessionsFor(8))
	assert.Equal(t, math.MaxInt32, maxSessionsFor(math.MaxUint64), "RLIM_INFINITY")
}

// serveWithFileLimit starts monolock serve with a soft and hard open file
// limit of n.
func serveWithFileLimit(t *testing.T, n int, args ...string) *testbin.Server {
	t.Helper()
	args = append([]string{"-c", fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, n), binary, "serve",
		"--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--admin", "off"}, args...)
	cmd := exec.Command("sh", args...)
	cmd.Env = cleanEnv()
	return testbin.Start(t, wait, cmd)
}

// Without --max-sessions, the limit comes from the open file limit: a
// flood is refused cleanly (closed before any byte), the log says so a few
// times, not once per connection, and the server keeps serving.
// --max-sessions 0 still means no limit.
func TestDefaultMaxSessionsFromFileLimit(t *testing.T) {
	p := serveWithFileLimit(t, 80)
	p.WaitLog(0, wait, `msg="session limit" max_sessions=16 `)
	for i := range 16 {
		c := rawDial(t, p.Addr)
		c.acquire(t, fmt.Sprint("held/", i))
		require.Equal(t, protocol.MsgAcquired, c.readType(t), "session %d", i)
	}
	for range 20 {
		over := rawDial(t, p.Addr)
		over.acquire(t, "over")
		n, err := over.conn.Read(make([]byte, 1))
		require.Zero(t, n, "over the limit: closed before any reply")
		require.True(t, errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET), "closed, not %v", err)
		over.conn.Close()
	}
	p.WaitLog(0, wait, `msg="session limit reached; refusing connections" max_sessions=16`)
	assert.Equal(t, 5, strings.Count(p.LogText(), `msg="session limit reached; refusing connections"`), p.LogText())

	q := serveWithFileLimit(t, 80, "--max-sessions", "0")
	q.WaitLog(0, wait, `msg="session limit" max_sessions=0 `)
	for i := range 17 {
		c := rawDial(t, q.Addr)
		c.acquire(t, fmt.Sprint("held/", i))
		require.Equal(t, protocol.MsgAcquired, c.readType(t), "session %d", i)
	}
}

// The admin API answers loopback names, the listen host and the names of
// --admin-allowed-hosts, and refuses others; monolock locks keeps working.
func TestAdminAllowedHosts(t *testing.T) {
	code, _, stderr := command(t, nil, "serve", "--check-config", "--admin-allowed-hosts", "locks.internal:7118")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, `--admin-allowed-hosts "locks.internal:7118": want a host name or IP address`)

	p := startServe(t, []string{"MONOLOCK_ADMIN_ALLOWED_HOSTS=locks.internal, 192.0.2.7"},
		"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0")
	get := func(host string) int {
		req, err := http.NewRequest(http.MethodGet, "http://"+p.admin+"/v1/locks", nil)
		require.NoError(t, err)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusOK, get("locks.internal:7118"))
	assert.Equal(t, http.StatusOK, get("192.0.2.7"))
	assert.Equal(t, http.StatusOK, get(p.admin))
	assert.Equal(t, http.StatusMisdirectedRequest, get("rebind.evil.example:7118"))

	code, stdout, stderr := command(t, nil, "locks", "--admin", p.admin)
	assert.Equal(t, 0, code, stderr)
	assert.Equal(t, "no locks\n", stdout)
}

// Every duration flag takes a bare number as seconds, as flock users type.
func TestServeDurationFlagsTakeSeconds(t *testing.T) {
	code, stdout, stderr := command(t, nil, "serve", "--check-config", "--data-dir", t.TempDir(),
		"--drain-timeout", "5", "--max-lease", "60", "--handshake-timeout", "0.5", "--lock-delay", "1.5")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout+stderr, "configuration OK")
}

// A reload (SIGHUP) whose ACL or certificate was swapped for a FIFO fails
// at once and keeps the configuration in force: it never waits for a
// writer on the FIFO (it did, and only SIGTERM's abandonment of the reload
// let the server stop), and SIGTERM stops the server as always.
func TestReloadOfAFIFOFailsAtOnce(t *testing.T) {
	dir := t.TempDir()
	aclPath := filepath.Join(dir, "acl")
	require.NoError(t, os.WriteFile(aclPath, []byte("anonymous jobs/*\n"), 0o600))
	ca := testcerts.NewCA(t, "ca")
	cert, key := ca.Issue(t, testcerts.Spec{CN: "server", Server: true}).Write(t, dir, "server")
	p := startServe(t, nil, "--listen", "127.0.0.1:0", "--admin", "off", "--acl", aclPath, "--tls-cert", cert, "--tls-key", key, "--drain-timeout", "2s")
	for _, path := range []string{aclPath, cert} {
		require.NoError(t, os.Remove(path))
		require.NoError(t, syscall.Mkfifo(path, 0o600)) // opening it for reading would wait for a writer
		n := len(p.Log())
		require.NoError(t, p.Cmd.Process.Signal(syscall.SIGHUP))
		p.WaitLog(n, wait, "reload failed; keeping the previous configuration")
		assert.Contains(t, strings.Join(p.Log()[n:], "\n"), "is a FIFO, not a regular file")
	}
	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 0, p.WaitExit(wait), "the server stops: %s", p.LogText())
	assert.NotContains(t, p.LogText(), "a reload was still running at shutdown")
}

// expectKicked reads the ERROR 0x02 (closed by an administrator) that a
// kicked session gets.
func expectKicked(t *testing.T, conn net.Conn) {
	t.Helper()
	var b [1]byte
	_, err := io.ReadFull(conn, b[:])
	require.NoError(t, err)
	require.Equal(t, protocol.MsgError, b[0])
	code, _, err := protocol.ReadErrorBody(conn)
	require.NoError(t, err)
	assert.Equal(t, protocol.ErrAdminClosed.Code, code)
}

// A second server on a data directory is told which flag to change.
func TestDataDirInUseNamesTheFlag(t *testing.T) {
	dir := t.TempDir()
	startServe(t, nil, "--listen", "127.0.0.1:0", "--admin", "off", "--data-dir", dir)
	code, _, stderr := command(t, nil, "serve", "--listen", "127.0.0.1:0", "--admin", "off", "--data-dir", dir)
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stderr, "--data-dir "+dir+" is in use by another server ("+filepath.Join(dir, "lock")+" is locked): stop that server, or give this one its own --data-dir")
	assert.NotContains(t, stderr, "tokenstore:")
}

// A bad ACL line points at the page that describes the format, not at the
// flags; the other bad files still point at -h.
func TestBadACLPointsAtTheACLPage(t *testing.T) {
	dir := t.TempDir()
	badACL := filepath.Join(dir, "bad.acl")
	require.NoError(t, os.WriteFile(badACL, []byte("who-knows jobs/*\n"), 0o600))
	code, _, stderr := command(t, nil, "serve", "--check-config", "--acl", badACL)
	assert.Equal(t, 2, code, stderr)
	assert.Equal(t, "monolock serve: --acl "+badACL+`: line 1: identity "who-knows": want anonymous, *, or a cn:, dns: or uri: prefix (the format: docs/operating.md, "Authorization (ACL)")`+"\n", stderr)
	_, _, stderr = command(t, nil, "serve", "--check-config", "--admin-token-file", filepath.Join(dir, "missing"))
	assert.Equal(t, "monolock serve: --admin-token-file: open "+filepath.Join(dir, "missing")+": no such file or directory (see monolock serve -h)\n", stderr)
}

// serve -h spells the flags as run -h and the docs do: --flag.
func TestServeHelpSpellsFlagsWithTwoDashes(t *testing.T) {
	code, stdout, _ := command(t, nil, "serve", "-h")
	require.Equal(t, 0, code)
	assert.Contains(t, stdout, "\n  --acl FILE\n")
	assert.Contains(t, stdout, "\n  --max-sessions N\n")
	assert.NotRegexp(t, `(?m)^  -[a-z]`, stdout)
}
