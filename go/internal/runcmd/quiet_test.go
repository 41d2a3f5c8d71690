//go:build unix

package runcmd

import (
	"bufio"
	"bytes"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/client"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// passiveServer answers every ACQUIRE as a passive server of an HA cell
// does: ERROR 0x03 naming the active server.
func passiveServer(t *testing.T, active string) string {
	t.Helper()
	return errorServer(t, protocol.ErrNotActive.Code, active)
}

// errorServer answers every ACQUIRE with ERROR code and reason.
func errorServer(t *testing.T, code uint8, reason string) string {
	return fakeServer(t, func(conn net.Conn) {
		r := bufio.NewReader(conn)
		if _, err := r.ReadByte(); err != nil {
			return
		}
		if _, _, _, err := protocol.ReadAcquireBody(r); err != nil {
			return
		}
		_, _ = conn.Write(protocol.AppendError(nil, code, reason))
	})
}

// fakeServer listens on loopback and hands every connection to serve on a
// goroutine of its own, closing it after; it returns the address.
func fakeServer(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				serve(conn)
			}()
		}
	}()
	return ln.Addr().String()
}

// Moving past a passive server is how an HA list works: it is told with
// -v only, never as a warning.
func TestRunQuietPastPassiveServer(t *testing.T) {
	srv := startServer(t)
	passive := passiveServer(t, srv.Addr)
	code, out := run(t, t.TempDir(), "--server", passive+","+srv.Addr, "x", "--", "true")
	require.Equal(t, 0, code, out)
	assert.Empty(t, out, "a healthy HA list says nothing")

	code, out = run(t, t.TempDir(), "--server", passive+","+srv.Addr, "-v", "x", "--", "true")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "not the active server", "-v tells it")
	assertHumanLines(t, out)
}

// While no server can be reached, the same warning is written once and
// then at most once per retryLogEvery, with a count of those left out.
func TestRunRetryWarningsRateLimited(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	down := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	code, out := run(t, t.TempDir(), "--server", down, "-w", "2.5", "x", "--", "true")
	assert.Equal(t, ExitUnavailable, code, out)
	assert.Equal(t, 1, strings.Count(out, "acquisition failed, retrying"), out)
	assert.Contains(t, out, "timed out after 2.5s", out)
}

// The filter on a clock of its own: the first warning, then one per
// retryLogEvery with the count of those left out; another error at once.
func TestRetryFilterCountsWhatItLeavesOut(t *testing.T) {
	var out bytes.Buffer
	f := newRetryFilter(newHumanHandler(&out, slog.LevelInfo), false)
	now := time.Unix(1000, 0)
	f.st.now = func() time.Time { return now }
	log := slog.New(f).With("lock", "x")
	down := errors.New("monolock: no server available: cannot connect to a:1")
	for i := 0; i < 5; i++ {
		log.Warn(retryMsg, "err", down)
		now = now.Add(time.Second)
	}
	now = now.Add(retryLogEvery)
	log.Warn(retryMsg, "err", down)
	other := errors.New("monolock: something else")
	log.Warn(retryMsg, "err", other)
	log.Warn(retryMsg, "err", down) // in turn with other: each is limited
	log.Warn(retryMsg, "err", other)
	passive := &client.ServerError{Code: 0x03, Reason: "b:1"}
	log.Warn(retryMsg, "err", passive)
	log.Info("monolock: lock lost", "err", down)
	assert.Equal(t, "monolock run: acquisition failed, retrying: no server available: cannot connect to a:1\n"+
		"monolock run: acquisition failed, retrying (4 more like this not shown): no server available: cannot connect to a:1\n"+
		"monolock run: acquisition failed, retrying: something else\n", out.String())

	// With -v, the passive server is told as what it is.
	out.Reset()
	log = slog.New(newRetryFilter(newHumanHandler(&out, slog.LevelInfo), true))
	log.Warn(retryMsg, "err", passive)
	assert.Equal(t, "monolock run: trying the next server: not the active server; the active server is b:1 (0x03)\n", out.String())
}

// A server's reason is someone else's text: escaped, it cannot drive the
// terminal or forge a line.
func TestRunEscapesServerText(t *testing.T) {
	addr := errorServer(t, protocol.ErrNotAuthorized.Code, "evil\x1b[31mRED\x1b]0;pwned\x07\r\nFAKE-LINE")
	code, out := run(t, t.TempDir(), "--server", addr, "x", "--", "true")
	assert.Equal(t, ExitRefused, code, out)
	assert.NotContains(t, out, "\x1b")
	assert.NotContains(t, out, "\x07")
	assert.NotContains(t, out, "\r")
	assert.Equal(t, 1, strings.Count(out, "\n"), out)
	assert.Contains(t, out, `evil\x1b[31mRED\x1b]0;pwned\a\r\nFAKE-LINE`)
}
