package monolock

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A session's locks are the Client's Lock: tokens, busy, Unlock that
// frees the lock at once while the session lives on, and Close that
// releases what is left without calling a LostListener.
func TestSessionAcquireUnlockClose(t *testing.T) {
	addr, _ := startServer(t)
	c := newTestClient(t, addr, 5000)
	other := newTestClient(t, addr, 5000)
	s, err := c.OpenSession(5000)
	require.NoError(t, err)
	require.True(t, s.IsOpen())
	require.Equal(t, "", s.EndKind())
	require.Positive(t, s.MaxStreams())
	require.InDelta(t, time.Now().Add(4*time.Second).UnixMilli(), s.ValidUntilMillis(), 2000)

	a, err := s.Acquire("s/a", 5000, nil)
	require.NoError(t, err)
	b, err := s.TryAcquire("s/b")
	require.NoError(t, err)
	require.Greater(t, b.Token(), a.Token())
	require.Equal(t, "s/b", b.Name())
	require.True(t, a.IsHeld())
	require.Greater(t, a.ValidForMillis(), int64(2000))
	rec := newLostRecorder()
	b.SetLostListener(rec)

	_, err = other.TryAcquire("s/a")
	require.Equal(t, KindBusy, ErrorKind(err), "the session holds s/a")
	_, err = s.TryAcquire("s/a")
	require.Equal(t, KindBusy, ErrorKind(err), "a second claim on the session queues behind the first")
	require.True(t, s.IsOpen(), "a busy try leaves the session open")

	// Unlock returns once the server has let the lock go.
	a.Unlock()
	require.False(t, a.IsHeld())
	require.False(t, a.IsLost())
	again, err := other.TryAcquire("s/a")
	require.NoError(t, err)
	require.Greater(t, again.Token(), b.Token())
	again.Unlock()
	require.True(t, b.IsHeld(), "unlocking one lock keeps the session's others")

	// A waiter elsewhere gets s/b once Close releases it.
	got := make(chan *Lock, 1)
	go func() {
		l, err := other.Acquire("s/b", waitBound.Milliseconds(), nil)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	time.Sleep(100 * time.Millisecond) // let it queue; the result is the same either way
	s.Close()
	s.Close() // idempotent
	select {
	case l := <-got:
		require.Greater(t, l.Token(), b.Token())
		l.Unlock()
	case <-time.After(waitBound):
		t.Fatal("Close did not release the session's lock")
	}
	require.False(t, b.IsHeld())
	require.False(t, b.IsLost(), "closing is not a loss")
	require.False(t, s.IsOpen())
	require.Equal(t, SessionClosed, s.EndKind())
	select {
	case <-rec.first:
		t.Fatal("OnLost called for a lock its session's Close released")
	case <-time.After(200 * time.Millisecond):
	}
	_, err = s.Acquire("s/c", 1000, nil)
	require.Equal(t, KindIO, ErrorKind(err), "a closed session takes no claim")
}

// Shared claims and semaphores on a session, the Waiting listener of the
// session's client, and a timeout or a cancel that leaves the session
// usable.
func TestSessionSharedWaitingTimeoutCancel(t *testing.T) {
	addr, _ := startServer(t)
	holder, err := newTestClient(t, addr, 5000).Acquire("w", NoTimeout, nil)
	require.NoError(t, err)

	waiting := make(chan string, 4)
	cfg := NewConfig()
	cfg.Servers = addr
	cfg.LeaseMillis = 5000
	cfg.Waiting = waitingFunc(func(name string) { waiting <- name })
	c, err := NewClient(cfg)
	require.NoError(t, err)
	s, err := c.OpenSession(NoTimeout)
	require.NoError(t, err)
	defer s.Close()

	r1, err := s.AcquireShared("r", 5000, nil)
	require.NoError(t, err)
	r2, err := s.TryAcquireShared("r")
	require.NoError(t, err, "two shared holders at once")
	p1, err := s.AcquireSemaphore("sem", 1, 5000, nil)
	require.NoError(t, err)
	_, err = s.TryAcquireSemaphore("sem", 1)
	require.Equal(t, KindBusy, ErrorKind(err), "the only permit is taken")
	_, err = s.TryAcquireSemaphore("sem", 2)
	require.Equal(t, KindServer, ErrorKind(err))
	require.Equal(t, 0x1a, ErrorCode(err), "another number of permits")
	require.True(t, s.IsOpen(), "a refused claim leaves the session open")
	for _, l := range []*Lock{r1, r2, p1} {
		l.Unlock()
	}

	cancel := NewCanceller()
	done := make(chan error, 1)
	go func() {
		_, err := s.Acquire("w", NoTimeout, cancel)
		done <- err
	}()
	select {
	case name := <-waiting:
		require.Equal(t, "w", name)
	case <-time.After(waitBound):
		t.Fatal("no OnWaiting for a session's claim")
	}
	cancel.Cancel()
	select {
	case err := <-done:
		require.Equal(t, KindCancelled, ErrorKind(err))
	case <-time.After(waitBound):
		t.Fatal("Cancel did not end the session's Acquire")
	}

	// Whether it queued by then or not, a timeout ends the wait the same.
	_, err = s.Acquire("w", 200, nil)
	require.Equal(t, KindTimeout, ErrorKind(err))

	// The abandoned claims left the queue: the lock goes to the session's
	// next claim when the holder lets it go.
	require.True(t, s.IsOpen())
	go func() {
		<-waiting // this claim's, or the timed-out one's: the outcome is the same
		holder.Unlock()
	}()
	l, err := s.Acquire("w", waitBound.Milliseconds(), nil)
	require.NoError(t, err)
	require.Greater(t, l.Token(), holder.Token())
	l.Unlock()
}

// The session's end loses every lock it holds, each told to its listener.
func TestSessionLossLosesEveryLock(t *testing.T) {
	addr, stop := startServer(t)
	s, err := newTestClient(t, addr, 5000).OpenSession(5000)
	require.NoError(t, err)
	var recs []*lostRecorder
	var locks []*Lock
	for _, name := range []string{"x/1", "x/2"} {
		l, err := s.Acquire(name, 5000, nil)
		require.NoError(t, err)
		rec := newLostRecorder()
		l.SetLostListener(rec)
		recs, locks = append(recs, rec), append(locks, l)
	}
	stop() // graceful shutdown: the server ends the session with 0x01
	for i, rec := range recs {
		calls := rec.wait(t)
		require.Len(t, calls, 1)
		require.Regexp(t, `^1\|`, calls[0])
		require.True(t, locks[i].IsLost())
		require.Equal(t, KindServer, locks[i].LostKind())
		require.Equal(t, 1, locks[i].LostCode())
	}
	require.False(t, s.IsOpen())
	require.Equal(t, KindServer, s.EndKind())
	_, err = s.TryAcquire("x/3")
	require.Error(t, err)
	s.Close()
	require.Equal(t, KindServer, s.EndKind(), "Close after the end keeps its cause")
}

// A campaign on a session is a term: followers see its value, Proclaim
// changes it under the same token, and Resign leaves no leader.
func TestSessionCampaign(t *testing.T) {
	addr, _ := startServer(t)
	c := newTestClient(t, addr, 5000)
	s, err := c.OpenSession(5000)
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Campaign("lead", "", 5000, nil)
	require.Equal(t, KindValidation, ErrorKind(err))
	term, err := s.Campaign("lead", "10.0.0.7:80", 5000, nil)
	require.NoError(t, err)
	l, err := c.Leader("lead", 5000)
	require.NoError(t, err)
	require.Equal(t, LeaderLeading, l.State)
	require.Equal(t, term.TokenString(), l.TokenString)
	require.Equal(t, "10.0.0.7:80", l.Value)
	require.NoError(t, term.Proclaim("10.0.0.7:81"))
	l, err = c.Leader("lead", 5000)
	require.NoError(t, err)
	require.Equal(t, "10.0.0.7:81", l.Value)
	require.Equal(t, term.Token(), l.Token)
	term.Resign()
	l, err = c.Leader("lead", 5000)
	require.NoError(t, err)
	require.Equal(t, LeaderNone, l.State)
	require.True(t, s.IsOpen())
}

func TestSessionUnreachableAndZero(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	_, err = newTestClient(t, addr, 1000).OpenSession(NoTimeout)
	require.Equal(t, KindConnect, ErrorKind(err))

	var s Session // what new Session() in Java makes
	require.False(t, s.IsOpen())
	require.Equal(t, SessionClosed, s.EndKind())
	require.Zero(t, s.ValidUntilMillis())
	require.Zero(t, s.MaxStreams())
	_, err = s.Acquire("x", 0, nil)
	require.Equal(t, KindIO, ErrorKind(err))
	_, err = s.TryAcquire("x")
	require.Equal(t, KindIO, ErrorKind(err))
	s.Close()
}
