package client

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/pkg/protocol"
)

func sharedAsync(t *testing.T, c *Client, name string, opts ...AcquireOption) <-chan acquireResult {
	ch := make(chan acquireResult, 1)
	go func() {
		var r acquireResult
		r.lock, r.err = c.Acquire(ctxTimeout(t, wait), name, opts...)
		r.at = time.Now()
		ch <- r
	}()
	return ch
}

func pending(t *testing.T, ch <-chan acquireResult, d time.Duration) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("granted or failed while it should wait: %+v", r)
	case <-time.After(d):
	}
}

// Readers hold together; a writer waits for every reader; a reader that
// comes after the waiting writer waits for it too.
func TestRealSharedReadersAndAWriter(t *testing.T) {
	srv := startRealServer(t)
	c := newClient(t, srv.Addr, 2*time.Second)
	r1, err := c.Acquire(ctxTimeout(t, wait), "rw", Shared())
	require.NoError(t, err)
	r2, err := c.Acquire(ctxTimeout(t, wait), "rw", Shared())
	require.NoError(t, err)
	assert.Greater(t, r2.Token(), r1.Token(), "every grant its own token")

	queued := make(chan string, 2)
	waiter := newClient(t, srv.Addr, 2*time.Second, WithOnWaiting(func(name string) { queued <- name }))
	writer := sharedAsync(t, waiter, "rw")
	require.Equal(t, "rw", receive(t, queued))
	late := sharedAsync(t, waiter, "rw", Shared())
	require.Equal(t, "rw", receive(t, queued), "a reader behind a waiting writer waits")

	require.NoError(t, r1.Release())
	pending(t, writer, 200*time.Millisecond)
	require.NoError(t, r2.Release())
	w := result(t, writer)
	require.NoError(t, w.err)
	pending(t, late, 200*time.Millisecond)
	require.NoError(t, w.lock.Release())
	r3 := result(t, late)
	require.NoError(t, r3.err)
	assert.Greater(t, r3.lock.Token(), w.lock.Token())
	require.NoError(t, r3.lock.Release())
}

func TestRealSemaphoreOfThreeWithFourClaimants(t *testing.T) {
	srv := startRealServer(t)
	c := newClient(t, srv.Addr, 2*time.Second)
	var held []*Lock
	for range 3 {
		l, err := c.Acquire(ctxTimeout(t, wait), "pool", Limit(3))
		require.NoError(t, err)
		held = append(held, l)
	}
	_, err := c.TryAcquire(ctxTimeout(t, wait), "pool", Limit(3))
	require.ErrorIs(t, err, ErrBusy, "no fourth permit")
	fourth := sharedAsync(t, c, "pool", Limit(3))
	pending(t, fourth, 200*time.Millisecond)
	require.NoError(t, held[1].Release())
	r := result(t, fourth)
	require.NoError(t, r.err)
	require.NoError(t, r.lock.Release())

	_, err = c.Acquire(ctxTimeout(t, wait), "pool", Limit(4))
	var se *ServerError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, protocol.ErrLimitMismatch.Code, se.Code)
	assert.Contains(t, err.Error(), "limit 4 differs from the limit 3")
	_, err = c.Acquire(ctxTimeout(t, wait), "pool", Shared())
	require.ErrorIs(t, err, protocol.ErrLimitMismatch, "no limit differs from 3 too")
	for _, l := range []*Lock{held[0], held[2]} {
		require.NoError(t, l.Release())
	}
}

func TestLimitIsValidatedBeforeAnythingIsSent(t *testing.T) {
	fake := newFakeServer(t)
	c := newClient(t, fake.addr(), time.Second)
	for _, n := range []int{0, -1, math.MaxUint16 + 1} {
		_, err := c.Acquire(ctxTimeout(t, wait), "pool", Limit(n))
		require.ErrorIs(t, err, protocol.ErrInvalidMode, "limit %d", n)
		assert.Contains(t, err.Error(), "from 1 to 65535 permits")
	}
	// The mode check comes before the name checks, as on the server.
	_, err := c.Acquire(ctxTimeout(t, wait), "", Limit(0))
	require.ErrorIs(t, err, protocol.ErrInvalidMode)
	_, err = c.Acquire(ctxTimeout(t, wait), "", Shared())
	require.ErrorIs(t, err, protocol.ErrEmptyName)
	fake.noConnection(100 * time.Millisecond)
}

// A shared claim goes out as version 2; an exclusive one stays version 1,
// so that it works against a version 1 server.
func TestSharedClaimsSendVersion2AndExclusiveOnesVersion1(t *testing.T) {
	fake := newFakeServer(t)
	c := newClient(t, fake.addr(), time.Second)
	done := acquireAsync(ctxTimeout(t, wait), c, "x", false)
	conn := fake.accept()
	conn.expectAcquire("x", time.Second)
	conn.send(acquired(1))
	r := result(t, done)
	require.NoError(t, r.err)
	go r.lock.Release()

	shared := sharedAsync(t, c, "x", Limit(2))
	conn = fake.accept()
	want, err := protocol.AppendAcquireV2(nil, "x", 1000, protocol.ModeShared, 2)
	require.NoError(t, err)
	conn.expect(want)
	conn.send(acquired(2))
	r = result(t, shared)
	require.NoError(t, r.err)
	go r.lock.Release()
}

// A version 1 server answers the version 2 frame with 0x10: a terminal
// error that says what is missing, at once and not retried.
func TestSharedAgainstAVersion1ServerIsTerminal(t *testing.T) {
	fake := newFakeServer(t)
	c := newClient(t, fake.addr(), time.Second)
	done := sharedAsync(t, c, "x", Shared())
	conn := fake.accept()
	conn.next() // the type byte
	conn.send(errFrame(protocol.ErrUnsupportedVersion.Code, "unsupported protocol version"))
	r := result(t, done)
	require.ErrorIs(t, r.err, ErrSharedUnsupported)
	require.ErrorIs(t, r.err, protocol.ErrUnsupportedVersion)
	var se *ServerError
	require.True(t, errors.As(r.err, &se))
	assert.Contains(t, r.err.Error(), "does not support shared locks or semaphores")
	fake.noConnection(300 * time.Millisecond)
}
