package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/lograte"
	"github.com/monolock/monolock/go/internal/testcerts"
)

// logBuffer collects a server's log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// count returns how many lines contain sub.
func (b *logBuffer) count(sub string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.buf.String(), sub)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// noiseCounter is an Observer that also counts what a flood causes.
type noiseCounter struct {
	nopObserver
	mu                     sync.Mutex
	accepts, tls, refusals int
}

func (n *noiseCounter) AcceptFailed()       { n.mu.Lock(); n.accepts++; n.mu.Unlock() }
func (n *noiseCounter) TLSHandshakeFailed() { n.mu.Lock(); n.tls++; n.mu.Unlock() }
func (n *noiseCounter) Refused(string)      { n.mu.Lock(); n.refusals++; n.mu.Unlock() }

func (n *noiseCounter) get() (accepts, tls, refusals int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.accepts, n.tls, n.refusals
}

// waitFor polls cond; the bound only turns a hang into a failure.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(replyTimeout); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// The wait after failed accepts doubles up to a second while failures go
// on, and starts over only after a quiet period.
func TestAcceptBackoffGrowsUntilQuiet(t *testing.T) {
	var b acceptBackoff
	now := time.Unix(1_000_000, 0)
	var waits []time.Duration
	for range 10 {
		w := b.next(now)
		waits = append(waits, w)
		now = now.Add(w + time.Millisecond) // one accept succeeds in between
	}
	ms := time.Millisecond
	assert.Equal(t, []time.Duration{5 * ms, 10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 320 * ms, 640 * ms, time.Second, time.Second}, waits)
	last := now.Add(-time.Second - ms) // the last failure
	now = last.Add(acceptQuiet - ms)
	assert.Equal(t, time.Second, b.next(now), "not quiet yet")
	assert.Equal(t, 5*ms, b.next(now.Add(acceptQuiet)), "quiet: start over")
}

// flakyListener alternates failed and successful accepts, as a server out
// of file descriptors sees them, then blocks until closed.
type flakyListener struct {
	net.Listener // the address only
	failures     int
	mu           sync.Mutex
	n            int
	closed       chan struct{}
	once         sync.Once
}

type tempErr struct{}

func (tempErr) Error() string   { return "accept: too many open files" }
func (tempErr) Temporary() bool { return true }
func (tempErr) Timeout() bool   { return false }

func (l *flakyListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	l.n++
	n := l.n
	l.mu.Unlock()
	if n <= 2*l.failures {
		if n%2 == 1 {
			return nil, tempErr{}
		}
		srv, cli := net.Pipe()
		cli.Close() // a peer that gives up at once: its session just ends
		return srv, nil
	}
	<-l.closed
	return nil, net.ErrClosed
}

func (l *flakyListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

// Accept failures interleaved with successes, as when file descriptors run
// out: the back-off keeps growing (a success used to reset it to 5 ms),
// every failure is counted, and only the first five are logged.
func TestAcceptFailuresBackOffAndLogBounded(t *testing.T) {
	var logs logBuffer
	obs := &noiseCounter{}
	srv, err := New(Config{DataDir: t.TempDir(), Logger: logs.logger(), Observer: obs})
	require.NoError(t, err)
	var mu sync.Mutex
	var waits []time.Duration
	srv.sleep = func(d time.Duration) { mu.Lock(); waits = append(waits, d); mu.Unlock() }
	ln := &flakyListener{failures: 40, closed: make(chan struct{})}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	waitFor(t, "40 failed accepts", func() bool { a, _, _ := obs.get(); return a == 40 })
	require.NoError(t, srv.Shutdown(t.Context()))
	require.NoError(t, <-served)

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, waits, 40)
	for i := 1; i < len(waits); i++ {
		require.GreaterOrEqual(t, waits[i], waits[i-1], "the wait never shrinks while failures go on: %v", waits)
	}
	assert.Equal(t, time.Second, waits[len(waits)-1])
	assert.Equal(t, 5, logs.count(`msg="accept failed; retrying"`), logs.String())
	assert.Contains(t, logs.String(), `msg="accept failed; retrying: similar lines suppressed" suppressed=35`,
		"Shutdown writes the pending summary")
}

// Junk on the TLS port: every failed handshake is counted, only the first
// five are logged.
func TestTLSHandshakeFailuresCountedAndLogBounded(t *testing.T) {
	cert, _ := testcerts.LoopbackServer(t)
	var logs logBuffer
	obs := &noiseCounter{}
	srv := startServerOn(t, Config{Logger: logs.logger(), Observer: obs}, func(ln net.Listener) net.Listener {
		return tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	})
	const floods = 30
	for range floods {
		c := dial(t, srv.addr)
		c.send([]byte("GET / HTTP/1.0\r\n\r\n"))
		c.expectClosed()
	}
	waitFor(t, "every failure counted", func() bool { _, n, _ := obs.get(); return n == floods })
	assert.Equal(t, 5, logs.count(`msg="TLS handshake failed"`), logs.String())
	assert.Contains(t, logs.String(), "first record does not look like a TLS handshake")
	waitFor(t, "the sessions to end", func() bool { return srv.Sessions() == 0 })
}

// At the session limit, refusals are counted and the log says so, a few
// times per interval, however many connections are turned away.
func TestSessionLimitReachedIsLoggedRateLimited(t *testing.T) {
	var logs logBuffer
	obs := &noiseCounter{}
	srv := startServer(t, Config{Logger: logs.logger(), Observer: obs, MaxSessions: 1})
	holder := dial(t, srv.addr)
	holder.acquire("x", 60000)
	holder.expectAcquired()
	for range 12 {
		c := dial(t, srv.addr)
		c.expectClosed()
	}
	_, _, refused := obs.get()
	assert.Equal(t, 12, refused)
	assert.Equal(t, 5, logs.count(`msg="session limit reached; refusing connections" max_sessions=1`), logs.String())
}

// A client that acquires and resets, connection after connection, gets
// each lock held back (a reset is no release), but the line that says so
// is rate-limited like every other line a peer can cause: the first few,
// then one summary with the count (here at shutdown's flush). The
// observer counts every one, as a reset; a holder that closes is not
// counted.
func TestResetHoldersAreLoggedRateLimited(t *testing.T) {
	var logs logBuffer
	obs := newCountingObserver()
	srv, err := New(Config{DataDir: t.TempDir(), Logger: logs.logger(), Observer: obs})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	const resets = 40
	for i := range resets {
		c := dial(t, ln.Addr().String())
		c.acquire(fmt.Sprintf("reset/%d", i), 60000)
		c.expectAcquired()
		require.NoError(t, c.conn.SetLinger(0))
		require.NoError(t, c.conn.Close())
	}
	closer := dial(t, ln.Addr().String())
	closer.acquire("closed", 60000)
	closer.expectAcquired()
	require.NoError(t, closer.conn.Close()) // a FIN: a release, nothing held back
	require.Eventually(t, func() bool {
		blocked := 0
		for _, l := range srv.Locks() {
			if l.Blocked {
				blocked++
			}
		}
		return blocked == resets
	}, 10*time.Second, 10*time.Millisecond, "every reset holder's lock is held back")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, srv.Shutdown(ctx))
	<-served
	assert.Equal(t, map[string]int{HeldBackReset: resets}, obs.snapshot().heldBack)
	assert.Equal(t, lograte.DefaultBurst, logs.count(`msg="holder gone without a release; lock held back" lock=`), logs.String())
	assert.Contains(t, logs.String(), fmt.Sprintf(`msg="holder gone without a release; lock held back: similar lines suppressed" suppressed=%d`, resets-lograte.DefaultBurst))
}
