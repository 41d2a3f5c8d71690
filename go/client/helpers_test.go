package client

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// newClient returns a client for addr and registers a check that the test
// leaves no session goroutine behind.
func newClient(t *testing.T, addr string, lease time.Duration, opts ...Option) *Client {
	t.Helper()
	opts = append([]Option{WithServers(addr), WithLease(lease), WithDialTimeout(2 * time.Second)}, opts...)
	c, err := New(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { requireNoSessions(t) })
	return c
}

// requireNoSessions fails if a claim's goroutine outlives the test: every
// lock must end with its connection closed and its goroutine gone.
func requireNoSessions(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		var leaked []string
		for _, g := range strings.Split(stacks, "\n\n") {
			if strings.Contains(g, "client.(*claim)") || strings.Contains(g, "client.(*Session)") || strings.Contains(g, "client.startClaim") ||
				strings.Contains(g, "client.(*Watch)") || strings.Contains(g, "client.readWatchFrames") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d session goroutines leaked:\n%s", len(leaked), strings.Join(leaked, "\n\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ctxTimeout returns a context that ends after d, cancelled with the test.
func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// acquireResult is what an acquisition returned, and when.
type acquireResult struct {
	lock *Lock
	err  error
	at   time.Time
}

// acquireAsync runs Acquire (or TryAcquire) on its own goroutine.
func acquireAsync(ctx context.Context, c *Client, name string, try bool) <-chan acquireResult {
	ch := make(chan acquireResult, 1)
	go func() {
		var r acquireResult
		if try {
			r.lock, r.err = c.TryAcquire(ctx, name)
		} else {
			r.lock, r.err = c.Acquire(ctx, name)
		}
		r.at = time.Now()
		ch <- r
	}()
	return ch
}

func result(t *testing.T, ch <-chan acquireResult) acquireResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(wait):
		t.Fatal("acquire did not return")
		return acquireResult{}
	}
}

// lockDone waits for the lock to end and returns when Done closed.
func lockDone(t *testing.T, l *Lock) time.Time {
	t.Helper()
	select {
	case <-l.Done():
		return time.Now()
	case <-time.After(wait):
		t.Fatal("lock did not end")
		return time.Time{}
	}
}

// grant runs the fake side of an immediate grant and returns the lock, the
// connection and the arrival time of the ACQUIRE.
func grant(t *testing.T, srv *fakeServer, c *Client, name string, token uint64) (*Lock, *fakeConn, time.Time) {
	t.Helper()
	res := acquireAsync(context.Background(), c, name, false)
	conn := srv.accept()
	tA := conn.expectAcquire(name, c.Lease())
	conn.send(acquired(token))
	r := result(t, res)
	require.NoError(t, r.err)
	t.Cleanup(func() { r.lock.Release() })
	return r.lock, conn, tA
}
