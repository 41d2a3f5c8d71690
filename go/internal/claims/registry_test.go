package claims

import (
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/locktable"
	"github.com/monolock/monolock/go/internal/sessionlimit"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// The claim layer without a socket: sinks that record what they are told.

type counter struct {
	mu sync.Mutex
	n  uint64
}

func (c *counter) Next() (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return c.n, nil
}

type nopObs struct{}

func (nopObs) Granted()                {}
func (nopObs) Promoted(time.Duration)  {}
func (nopObs) Expired()                {}
func (nopObs) TokenReservationFailed() {}
func (nopObs) HeldBack(string)         {}

// sink records the messages of one claim; ending releases the claim, as
// a connection does.
type sink struct {
	r       *Registry
	c       *Claim
	mu      sync.Mutex
	granted []uint64
	ended   *protocol.Error
}

func (s *sink) Granted(token uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.granted = append(s.granted, token)
	return true
}

func (s *sink) End(code *protocol.Error, _ string) bool {
	s.mu.Lock()
	s.ended = code
	s.mu.Unlock()
	s.r.Release(s.c, protocol.EndReleased)
	return true
}

func (s *sink) Peer() (string, string) { return "192.0.2.1:7", "cn:test" }

func (s *sink) grants() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]uint64(nil), s.granted...)
}

func newRegistry(lockDelay time.Duration) *Registry {
	return New(Config{Table: locktable.New(&counter{}), LockDelay: lockDelay, Observer: nopObs{}, Holds: nopObs{},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

var nextID uint64

func newClaim(r *Registry) (*Claim, *sink) {
	nextID++
	c := &Claim{}
	s := &sink{r: r, c: c}
	c.Init(nextID, s)
	return c, s
}

func exclusive(name string) Request {
	return Request{Name: name, Lease: 10 * time.Second, Conn: &net.TCPConn{}}
}

// A release hands the lock to the next waiter through its sink, with the
// token the table gave it.
func TestReleaseGrantsTheWaiterThroughItsSink(t *testing.T) {
	r := newRegistry(0)
	a, _ := newClaim(r)
	b, bs := newClaim(r)
	require.NoError(t, r.Admit(a, exclusive("x")))
	require.NoError(t, r.Admit(b, exclusive("x")))
	assert.NotZero(t, a.Token())
	assert.Zero(t, b.Token(), "b waits")
	r.Release(a, protocol.EndReleased)
	assert.Equal(t, []uint64{b.Token()}, bs.grants())
	assert.Greater(t, b.Token(), a.Token())
}

// A claim ended before its admission finished (a kick during the
// handshake) never enters the table afterwards.
func TestAClaimEndedBeforeItsAdmissionNeverEntersTheTable(t *testing.T) {
	r := newRegistry(0)
	a, _ := newClaim(r)
	r.Release(a, protocol.EndReleased)
	assert.ErrorIs(t, r.Admit(a, exclusive("x")), ErrEnded)
	locks, _, _ := r.Counts()
	assert.Zero(t, locks)
}

// A reset holder is held back: counted, listed with its end, its lock not
// granted until then; the connection's place is its own until the hold
// ends (here by a forced kick), then free.
func TestAResetHolderKeepsItsLockAndPlaceUntilKicked(t *testing.T) {
	r := newRegistry(0)
	limits := sessionlimit.New(2, 0, sessionlimit.DefaultIPv6Prefix)
	from := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1}
	place, why := limits.Take(from)
	require.Empty(t, why)
	a, _ := newClaim(r)
	b, bs := newClaim(r)
	require.NoError(t, r.Admit(a, exclusive("x")))
	require.NoError(t, r.Admit(b, exclusive("x")))

	r.Reset(a, time.Now().Add(time.Hour))
	r.Detach(a, place, false, time.Now().Add(time.Hour))
	assert.Equal(t, 1, r.HeldBack())
	until, ok := r.HeldBackUntil(a.ID())
	assert.True(t, ok)
	assert.WithinDuration(t, time.Now().Add(time.Hour), until, time.Minute)
	assert.Empty(t, bs.grants(), "b waits while a is held back")
	_, why = limits.Take(from)
	require.Empty(t, why)
	_, why = limits.Take(from)
	assert.Equal(t, sessionlimit.RefusedTotal, why, "a's place is still taken")

	page, _ := r.LockPage("", 10)
	require.Len(t, page, 1)
	require.Len(t, page[0].HeldBackHolders, 1)
	assert.Equal(t, a.ID(), page[0].HeldBackHolders[0].ID)
	require.Len(t, page[0].Waiters, 1)
	assert.Equal(t, "cn:test", page[0].Waiters[0].Identity, "a live claim is described by its sink")

	assert.True(t, r.KickHeldBack(a.ID()))
	assert.False(t, r.KickHeldBack(a.ID()), "once")
	assert.Equal(t, []uint64{b.Token()}, bs.grants())
	assert.Zero(t, r.HeldBack())
	_, why = limits.Take(from)
	assert.Empty(t, why, "a's place is free")
}

// A waiter that resets leaves at once: only a holder is held back, and
// its connection's place is given back.
func TestAResetWaiterLeaves(t *testing.T) {
	r := newRegistry(time.Hour)
	limits := sessionlimit.New(1, 0, sessionlimit.DefaultIPv6Prefix)
	from := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1}
	a, _ := newClaim(r)
	b, _ := newClaim(r)
	require.NoError(t, r.Admit(a, exclusive("x")))
	require.NoError(t, r.Admit(b, exclusive("x")))
	place, _ := limits.Take(from)
	r.Reset(b, time.Now().Add(time.Hour))
	r.Detach(b, place, false, time.Now())
	assert.Zero(t, r.HeldBack())
	_, why := limits.Take(from)
	assert.Empty(t, why)
}

// A lock delay holds an expired holder back for that long, then the lock
// goes on by itself.
func TestAnExpiredHolderIsHeldBackForTheLockDelay(t *testing.T) {
	const delay = 100 * time.Millisecond
	r := newRegistry(delay)
	a, _ := newClaim(r)
	b, bs := newClaim(r)
	require.NoError(t, r.Admit(a, exclusive("x")))
	require.NoError(t, r.Admit(b, exclusive("x")))
	expired := time.Now()
	assert.True(t, r.Expire(a))
	assert.Empty(t, bs.grants())
	require.Eventually(t, func() bool { return len(bs.grants()) == 1 }, 10*time.Second, 5*time.Millisecond)
	assert.GreaterOrEqual(t, time.Since(expired), delay)
}

// A claim the table refuses after its admission (another limit came
// first) gets the limit error with both limits.
func TestAdmitSaysBothLimits(t *testing.T) {
	r := newRegistry(0)
	a, _ := newClaim(r)
	req := exclusive("pool")
	req.Shared, req.Limit = true, 2
	require.NoError(t, r.Admit(a, req))
	b, _ := newClaim(r)
	req.Limit = 3
	err := r.Admit(b, req)
	var we *WireError
	require.ErrorAs(t, err, &we)
	assert.Equal(t, protocol.ErrLimitMismatch, we.Code)
	assert.Contains(t, we.Reason, "limit 3 differs from the limit 2")
}

// Shutdown: no claim enters, no waiter is promoted.
func TestCloseStopsGrants(t *testing.T) {
	r := newRegistry(0)
	a, _ := newClaim(r)
	b, bs := newClaim(r)
	require.NoError(t, r.Admit(a, exclusive("x")))
	require.NoError(t, r.Admit(b, exclusive("x")))
	r.Close()
	r.Release(a, protocol.EndReleased)
	assert.Empty(t, bs.grants())
	c, _ := newClaim(r)
	assert.ErrorIs(t, r.Admit(c, exclusive("y")), protocol.ErrShuttingDown)
}
