package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/testbin"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// adminOf is the admin API address a server logged.
func adminOf(t *testing.T, p *testbin.Server) string {
	t.Helper()
	return addrRE.FindStringSubmatch(p.WaitLog(0, wait, `msg="admin listening"`))[1]
}

// tokenFile writes an admin token and returns its file.
func tokenFile(t *testing.T, token string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(f, []byte(token+"\n"), 0o600))
	return f
}

// scrapeCounter reads one sample of the admin API's /metrics.
func scrapeCounter(t *testing.T, adminAddr, token, name, label, value string) float64 {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+adminAddr+"/metrics", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: wait}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	require.Contains(t, fams, name)
	for _, m := range fams[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label && l.GetValue() == value {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s{%s=%q}", name, label, value)
	return 0
}

// Under `ulimit -n 400` (--max-sessions defaults to 336), 1,000 admin
// connections that each send GET /healthz and stay open, as the attack
// review's 420 did, get at most --admin-max-connections (16) answers: the
// others are closed at once, none waits. The lock port keeps every one of
// its descriptors: all 336 sessions connect and acquire, and the server
// never fails an accept. A bearer token is configured and changes nothing
// (the connections are counted before any request is read).
//
// Before the admin limit, the server accepted admin connections up to the
// file limit: about 330 of them got an answer (more than 16), and the lock
// sessions then found no descriptor left (accept4: too many open files),
// so their ACQUIREs went unanswered and this test failed.
func TestIdleAdminConnectionsLeaveTheLockPortItsDescriptors(t *testing.T) {
	const (
		nofile      = 400
		maxSessions = nofile - fdReserve
		adminConns  = 1000
	)
	token := "s3cret"
	p := serveWithFileLimit(t, nofile, "--admin", "127.0.0.1:0", "--admin-token-file", tokenFile(t, token))
	p.WaitLog(0, wait, fmt.Sprintf(`msg="session limit" max_sessions=%d `, maxSessions))
	adminAddr := adminOf(t, p)

	conns := make([]net.Conn, 0, adminConns)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range adminConns {
		c, err := net.DialTimeout("tcp", adminAddr, wait)
		require.NoError(t, err, "the kernel completes the handshake; the server closes what it will not serve")
		conns = append(conns, c)
		// A write to a connection the server closed may fail: that is
		// the refusal, not an error of the test.
		_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
	}
	// Every connection is answered or closed: none is kept waiting.
	var mu sync.Mutex
	var answered []net.Conn
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() {
			_ = c.SetReadDeadline(time.Now().Add(wait))
			b := make([]byte, 512)
			n, err := c.Read(b)
			if n > 0 {
				assert.True(t, strings.HasPrefix(string(b[:n]), "HTTP/1.1 200 OK"), "%q", b[:n])
				mu.Lock()
				answered = append(answered, c)
				mu.Unlock()
				return
			}
			var ne net.Error
			assert.False(t, errors.As(err, &ne) && ne.Timeout(), "an admin connection neither answered nor closed: queued")
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, len(answered), defaultAdminConns, "admin connections served at once")
	assert.NotEmpty(t, answered)

	// With the admin connections still open: every session the lock port
	// allows connects and is granted its lock.
	for i := range maxSessions {
		c := rawDial(t, p.Addr)
		c.acquire(t, fmt.Sprintf("lock/%d", i))
		require.Equal(t, protocol.MsgAcquired, c.readType(t), "lock session %d of %d", i+1, maxSessions)
	}
	assert.NotContains(t, p.LogText(), "accept failed")
	p.WaitLog(0, wait, `msg="admin connection limit reached; closing connections" max_connections=16`)
	assert.LessOrEqual(t, strings.Count(p.LogText(), `msg="admin connection limit reached; closing connections" max_connections`), 5,
		"the log line is rate-limited")

	// Once the idle ones go, the admin API serves again, and has counted
	// every connection it closed.
	for _, c := range answered {
		c.Close()
	}
	var refused float64
	deadline := time.Now().Add(wait)
	for {
		req, err := http.NewRequest(http.MethodGet, "http://"+adminAddr+"/healthz", nil)
		require.NoError(t, err)
		resp, err := (&http.Client{Timeout: wait}).Do(req)
		if err == nil {
			resp.Body.Close()
			refused = scrapeCounter(t, adminAddr, token, "monolock_connections_refused_total", "reason", "admin_max_connections")
			break
		}
		require.True(t, time.Now().Before(deadline), "the admin API did not serve again: %v", err)
		time.Sleep(20 * time.Millisecond)
	}
	assert.GreaterOrEqual(t, refused, float64(adminConns-len(answered)))
}
