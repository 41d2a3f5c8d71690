package client

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/testcerts"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// Tests of the session's shell against the scripted fake server.

func TestSessionAcquireOpensStreamsInOrder(t *testing.T) {
	s, conn := fakeSession(t, time.Second)
	res := make(chan acquireResult, 2)
	go func() {
		l, err := s.Acquire(context.Background(), "a")
		res <- acquireResult{lock: l, err: err}
	}()
	f := conn.next(protocol.MsgOpen)
	assert.Equal(t, uint32(1), f.stream)
	assert.Equal(t, "a", f.acquire.Name)
	assert.Equal(t, uint32(1000), f.acquire.LeaseMS)
	assert.Equal(t, protocol.Version, f.acquire.Version)
	conn.send(streamAcquired(1, 42))
	r := result(t, res)
	require.NoError(t, r.err)
	assert.Equal(t, uint64(42), r.lock.Token())
	assert.Equal(t, "a", r.lock.Name())
	require.NoError(t, r.lock.Err())

	go func() {
		l, err := s.Acquire(context.Background(), "b", Value([]byte("v")))
		res <- acquireResult{lock: l, err: err}
	}()
	f = conn.next(protocol.MsgOpen)
	assert.Equal(t, uint32(2), f.stream)
	assert.Equal(t, protocol.VersionValue, f.acquire.Version)
	assert.Equal(t, []byte("v"), f.acquire.Value)
	conn.send(streamWaiting(2), streamAcquired(2, 43))
	r2 := result(t, res)
	require.NoError(t, r2.err)
	assert.Equal(t, uint64(43), r2.lock.Token())

	// Release waits for RELEASED.
	released := make(chan struct{})
	go func() { r.lock.Release(); close(released) }()
	f = conn.next(protocol.MsgRelease)
	assert.Equal(t, uint32(1), f.stream)
	select {
	case <-released:
		t.Fatal("Release returned before RELEASED")
	case <-time.After(50 * time.Millisecond):
	}
	conn.send(streamReleased(1))
	receive(t, released)
	require.ErrorIs(t, r.lock.Err(), ErrReleased)
	require.NoError(t, r2.lock.Err(), "the other claim of the session lives on")
}

func TestSessionTryAcquireBusyHandsBack(t *testing.T) {
	s, conn := fakeSession(t, time.Second)
	res := make(chan acquireResult, 1)
	go func() {
		l, err := s.TryAcquire(context.Background(), "busy", Limit(2))
		res <- acquireResult{lock: l, err: err}
	}()
	f := conn.next(protocol.MsgOpen)
	assert.Equal(t, protocol.VersionShared, f.acquire.Version)
	assert.Equal(t, uint16(2), f.acquire.Limit)
	conn.send(streamWaiting(f.stream))
	rel := conn.next(protocol.MsgRelease)
	assert.Equal(t, f.stream, rel.stream)
	select {
	case r := <-res:
		t.Fatalf("TryAcquire returned before RELEASED: %v", r.err)
	case <-time.After(50 * time.Millisecond):
	}
	conn.send(streamReleased(f.stream))
	r := result(t, res)
	require.ErrorIs(t, r.err, ErrBusy)
	assert.Contains(t, r.err.Error(), `all 2 permits of "busy" are taken`)
}

func TestSessionStreamEndFailsOrLoses(t *testing.T) {
	s, conn := fakeSession(t, time.Second)
	res := make(chan acquireResult, 2)
	go func() {
		l, err := s.Acquire(context.Background(), "held")
		res <- acquireResult{lock: l, err: err}
	}()
	held := conn.next(protocol.MsgOpen)
	conn.send(streamAcquired(held.stream, 7))
	lock := result(t, res).lock
	require.NotNil(t, lock)

	go func() {
		l, err := s.Acquire(context.Background(), "refused")
		res <- acquireResult{lock: l, err: err}
	}()
	refused := conn.next(protocol.MsgOpen)
	conn.send(protocol.AppendStreamEnd(nil, refused.stream, protocol.ErrNotAuthorized.Code, "no"))
	r := result(t, res)
	require.ErrorIs(t, r.err, protocol.ErrNotAuthorized)
	var se *ServerError
	require.ErrorAs(t, r.err, &se)
	require.NoError(t, lock.Err())

	conn.send(protocol.AppendStreamEnd(nil, held.stream, protocol.ErrAdminClosed.Code, "kicked"))
	lockDone(t, lock)
	require.ErrorIs(t, lock.Err(), ErrLockLost)
	require.ErrorIs(t, lock.Err(), protocol.ErrAdminClosed)
	require.NoError(t, s.Err(), "a stream's end is not the session's")
}

func TestSessionErrorLosesEveryClaimBeforeClose(t *testing.T) {
	s, conn := fakeSession(t, time.Second)
	var locks []*Lock
	for i := range 3 {
		res := make(chan acquireResult, 1)
		go func() {
			l, err := s.Acquire(context.Background(), string(rune('a'+i)))
			res <- acquireResult{lock: l, err: err}
		}()
		f := conn.next(protocol.MsgOpen)
		conn.send(streamAcquired(f.stream, uint64(10+i)))
		r := result(t, res)
		require.NoError(t, r.err)
		locks = append(locks, r.lock)
	}
	// The server's ERROR: its type byte alone ends the session.
	conn.send([]byte{protocol.MsgError})
	for _, l := range locks {
		lockDone(t, l)
		require.ErrorIs(t, l.Err(), ErrLockLost)
		require.ErrorIs(t, l.Err(), ErrServerEnded)
	}
	receive(t, s.Done())
	require.ErrorIs(t, s.Err(), ErrServerEnded)
	_, err := s.Acquire(context.Background(), "late")
	require.ErrorIs(t, err, ErrServerEnded)
	conn.ended()
}

// TestSessionSilentServerLosesAtTheDeadline: no ALIVE, so every claim is
// lost at the send of the last answered request plus 0.8 x lease, and the
// connection stays open until the lease ends.
func TestSessionSilentServerLosesAtTheDeadline(t *testing.T) {
	const lease = 500 * time.Millisecond
	s, conn := fakeSession(t, lease)
	res := make(chan acquireResult, 1)
	go func() {
		l, err := s.Acquire(context.Background(), "x")
		res <- acquireResult{lock: l, err: err}
	}()
	f := conn.next(protocol.MsgOpen)
	conn.send(streamAcquired(f.stream, 1))
	lock := result(t, res).lock
	require.NotNil(t, lock)
	valid := lock.ValidUntil()
	hb := conn.next(protocol.MsgHeartbeat) // not answered
	lost := lockDone(t, lock)
	assert.False(t, lost.Before(valid), "lost %v before its deadline", valid.Sub(lost))
	assert.True(t, hb.at.Before(valid))
	require.ErrorIs(t, lock.Err(), ErrClientTimeout)
	assert.Equal(t, valid, lock.ValidUntil(), "the deadline stays where it was")
	select {
	case f := <-conn.frames:
		if f.err == nil {
			t.Fatalf("the client sent 0x%02x after the loss", f.typ)
		}
		assert.False(t, time.Now().Before(lock.LeaseEnd().Add(-50*time.Millisecond)), "closed before the lease ended")
	case <-time.After(wait):
		t.Fatal("the connection was not closed at the lease's end")
	}
}

func TestSessionCloseReleasesAndInterruptsAcquire(t *testing.T) {
	s, conn := fakeSession(t, time.Second)
	res := make(chan acquireResult, 2)
	go func() {
		l, err := s.Acquire(context.Background(), "held")
		res <- acquireResult{lock: l, err: err}
	}()
	f := conn.next(protocol.MsgOpen)
	conn.send(streamAcquired(f.stream, 1))
	lock := result(t, res).lock
	go func() {
		l, err := s.Acquire(context.Background(), "queued")
		res <- acquireResult{lock: l, err: err}
	}()
	f = conn.next(protocol.MsgOpen)
	conn.send(streamWaiting(f.stream))
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, s.Close())
	require.ErrorIs(t, result(t, res).err, ErrSessionClosed)
	require.ErrorIs(t, lock.Err(), ErrReleased, "a closed session's claims are released, not lost")
	require.ErrorIs(t, s.Err(), ErrSessionClosed)
	conn.ended()
}

func TestSessionCancelledAcquireSendsRelease(t *testing.T) {
	s, conn := fakeSession(t, time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan acquireResult, 1)
	go func() {
		l, err := s.Acquire(ctx, "q")
		res <- acquireResult{lock: l, err: err}
	}()
	f := conn.next(protocol.MsgOpen)
	conn.send(streamWaiting(f.stream))
	time.Sleep(20 * time.Millisecond)
	cancel()
	require.ErrorIs(t, result(t, res).err, context.Canceled)
	rel := conn.next(protocol.MsgRelease)
	assert.Equal(t, f.stream, rel.stream)
	// A grant that crossed the RELEASE is dropped.
	conn.send(streamAcquired(f.stream, 9), streamReleased(f.stream))
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, s.Err())
}

func TestSessionProclaim(t *testing.T) {
	s, conn := fakeSession(t, time.Second)
	res := make(chan acquireResult, 1)
	go func() {
		l, err := s.Acquire(context.Background(), "p")
		res <- acquireResult{lock: l, err: err}
	}()
	f := conn.next(protocol.MsgOpen)
	conn.send(streamAcquired(f.stream, 5))
	lock := result(t, res).lock
	done := make(chan error, 1)
	go func() { done <- lock.Proclaim(context.Background(), []byte("new")) }()
	on := conn.next(protocol.MsgOn)
	assert.Equal(t, f.stream, on.stream)
	assert.Equal(t, []byte("new"), on.value)
	conn.send(streamAcquired(f.stream, 5))
	require.NoError(t, receive(t, done))
	require.Error(t, lock.Proclaim(context.Background(), make([]byte, protocol.MaxValueLen+1)))
	// A reply with another token breaks the protocol: the session ends.
	go func() { done <- lock.Proclaim(context.Background(), nil) }()
	conn.next(protocol.MsgOn)
	conn.send(streamAcquired(f.stream, 6))
	require.ErrorIs(t, receive(t, done), ErrProtocol)
	require.ErrorIs(t, s.Err(), ErrProtocol)
}

func TestSessionRefusedBySessionlessServer(t *testing.T) {
	for _, code := range []*protocol.Error{protocol.ErrUnknownMessage, protocol.ErrUnsupportedVersion, protocol.ErrExpectedAcquire} {
		t.Run(code.Error(), func(t *testing.T) {
			srv := newFakeServer(t)
			c := newClient(t, srv.addr(), time.Second)
			res := make(chan error, 1)
			go func() {
				_, err := c.Session(context.Background())
				res <- err
			}()
			conn := srv.accept()
			conn.expect([]byte{0x05, 0x04, 0, 0, 0x03, 0xe8})
			conn.send(errFrame(code.Code, ""))
			err := receive(t, res)
			require.ErrorIs(t, err, ErrSessionUnsupported)
			require.ErrorIs(t, err, code)
			srv.noConnection(100 * time.Millisecond) // terminal: not asked again
		})
	}
	// Any other refusal is the server's word, as it is.
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), time.Second)
	res := make(chan error, 1)
	go func() {
		_, err := c.Session(context.Background())
		res <- err
	}()
	conn := srv.accept()
	conn.expect([]byte{0x05, 0x04, 0, 0, 0x03, 0xe8})
	conn.send(errFrame(protocol.ErrInvalidLease.Code, "lease above the server's maximum"))
	err := receive(t, res)
	require.ErrorIs(t, err, protocol.ErrInvalidLease)
	require.NotErrorIs(t, err, ErrSessionUnsupported)
}

func TestSessionFollowsThePassiveServersLeader(t *testing.T) {
	passive, active := newFakeServer(t), newFakeServer(t)
	c, err := New(WithServers(passive.addr(), active.addr()), WithLease(time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { requireNoSessions(t) })
	res := make(chan error, 1)
	var s *Session
	go func() {
		var err error
		s, err = c.Session(ctxTimeout(t, wait))
		res <- err
	}()
	p := passive.accept()
	p.expect([]byte{0x05, 0x04, 0, 0, 0x03, 0xe8})
	p.send(errFrame(protocol.ErrNotActive.Code, active.addr()))
	a := acceptSession(t, active)
	a.next(protocol.MsgSession)
	a.send(sessionOK(7))
	require.NoError(t, receive(t, res))
	defer s.Close()
	assert.Equal(t, 7, s.MaxStreams())
}

func TestSessionUnreachable(t *testing.T) {
	c := newClient(t, "127.0.0.1:1", time.Second)
	_, err := c.Session(ctxTimeout(t, wait))
	require.ErrorIs(t, err, ErrUnavailable)
}

func TestSessionBadInputIsRefusedBeforeSending(t *testing.T) {
	s, conn := fakeSession(t, time.Second)
	_, err := s.Acquire(context.Background(), "")
	require.ErrorIs(t, err, protocol.ErrEmptyName)
	_, err = s.Acquire(context.Background(), string(make([]byte, protocol.MaxNameLen+1)))
	require.ErrorIs(t, err, protocol.ErrNameTooLong)
	_, err = s.Acquire(context.Background(), "x", Limit(0))
	require.ErrorIs(t, err, protocol.ErrInvalidMode)
	_, err = s.Watch(context.Background(), "")
	require.ErrorIs(t, err, protocol.ErrEmptyName)
	// Nothing of these reached the server: the next OPEN is stream 1.
	go s.TryAcquire(context.Background(), "ok")
	f := conn.next(protocol.MsgOpen)
	assert.Equal(t, uint32(1), f.stream)
	conn.send(streamAcquired(1, 1))
}

func TestSessionWithoutSessionOKTimesOut(t *testing.T) {
	const lease = 300 * time.Millisecond
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), lease)
	res := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := c.Session(ctxTimeout(t, wait))
		res <- err
	}()
	srv.accept() // silent
	err := receive(t, res)
	require.ErrorIs(t, err, ErrClientTimeout)
	assert.GreaterOrEqual(t, time.Since(start), 240*time.Millisecond, "not before 0.8 x lease")
}

// TestSessionFramesInPieces: frames split across reads are put together,
// and several in one read are all taken.
func TestSessionFramesInPieces(t *testing.T) {
	s, conn := fakeSession(t, time.Second)
	res := make(chan acquireResult, 2)
	for _, name := range []string{"a", "b"} {
		go func() {
			l, err := s.Acquire(context.Background(), name)
			res <- acquireResult{lock: l, err: err}
		}()
		conn.next(protocol.MsgOpen)
	}
	all := append(append(streamWaiting(1), streamAcquired(2, 1<<60)...), streamAcquired(1, 1<<60+1)...)
	for i := range all {
		conn.send(all[i : i+1])
		time.Sleep(2 * time.Millisecond)
	}
	tokens := map[uint64]bool{}
	for range 2 {
		r := result(t, res)
		require.NoError(t, r.err)
		tokens[r.lock.Token()] = true
	}
	assert.Equal(t, map[uint64]bool{1 << 60: true, 1<<60 + 1: true}, tokens)
	// An ERROR whose reason comes whole in one read is told with it.
	conn.send(errFrame(protocol.ErrAdminClosed.Code, "kicked by ops"))
	receive(t, s.Done())
	require.ErrorIs(t, s.Err(), protocol.ErrAdminClosed)
	assert.Contains(t, s.Err().Error(), "kicked by ops")
}

func TestSessionNotMonolock(t *testing.T) {
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), time.Second)
	res := make(chan error, 1)
	go func() {
		_, err := c.Session(ctxTimeout(t, wait))
		res <- err
	}()
	conn := srv.accept()
	conn.next()
	conn.send([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
	err := receive(t, res)
	require.ErrorIs(t, err, ErrUnavailable)
	require.ErrorIs(t, err, ErrProtocol)
	assert.Contains(t, err.Error(), "admin port")
}

// TestSessionOverTLS: a session speaks through TLS, and Close half-closes
// it (a TLS close_notify) and waits for the server.
func TestSessionOverTLS(t *testing.T) {
	cert, roots := testcerts.LoopbackServer(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	require.NoError(t, err)
	srv := newFakeServerOn(t, ln)
	c := newClient(t, srv.addr(), time.Second, WithTLS(&tls.Config{RootCAs: roots}))
	res := make(chan *Session, 1)
	go func() {
		s, err := c.Session(ctxTimeout(t, wait))
		assert.NoError(t, err)
		res <- s
	}()
	conn := acceptSession(t, srv)
	conn.next(protocol.MsgSession)
	conn.send(sessionOK(10))
	s := receive(t, res)
	require.NotNil(t, s)
	go s.Acquire(context.Background(), "tls")
	f := conn.next(protocol.MsgOpen)
	conn.send(streamAcquired(f.stream, 3))
	require.NoError(t, s.Close())
	conn.ended()

	// A client that does not trust the certificate gets no session.
	_, err = newClient(t, srv.addr(), time.Second, WithTLS(&tls.Config{})).Session(ctxTimeout(t, wait))
	require.ErrorIs(t, err, ErrUnavailable)
	var certErr *tls.CertificateVerificationError
	require.ErrorAs(t, err, &certErr)
}
