package locktable

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sharedClaim(id uint64, name string, limit uint16) *Claim {
	return &Claim{Session: id, Name: name, Shared: true, Limit: limit}
}

// acquire adds every claim and returns which were granted at once.
func acquire(t *testing.T, tab *Table, cs ...*Claim) []bool {
	t.Helper()
	granted := make([]bool, len(cs))
	for i, c := range cs {
		g, err := tab.Acquire(c)
		require.NoError(t, err)
		granted[i] = g
	}
	return granted
}

func TestSharedClaimsHoldTogetherEachWithItsOwnToken(t *testing.T) {
	tab := New(&counter{})
	r1, r2, r3 := sharedClaim(1, "a", 0), sharedClaim(2, "a", 0), sharedClaim(3, "a", 0)
	assert.Equal(t, []bool{true, true, true}, acquire(t, tab, r1, r2, r3))
	assert.Equal(t, []uint64{1, 2, 3}, []uint64{r1.Token(), r2.Token(), r3.Token()})
	snap := tab.Snapshot()
	require.Len(t, snap, 1)
	assert.True(t, snap[0].Shared)
	assert.Len(t, snap[0].Holders, 3)
	assert.Same(t, &snap[0].Holders[0], snap[0].Holder)
	_, held, _ := tab.Counts()
	assert.Equal(t, 1, held, "one held lock")
}

// A writer waits for every reader, and a reader behind the waiting writer
// waits too: no barging. The writer's release grants every reader queued
// before the next writer, in one promotion.
func TestWriterWaitsForReadersAndReadersDoNotOvertakeIt(t *testing.T) {
	tab := New(&counter{})
	r1, r2 := sharedClaim(1, "a", 0), sharedClaim(2, "a", 0)
	w := claim(3, "a")
	r3, r4 := sharedClaim(4, "a", 0), sharedClaim(5, "a", 0)
	w2 := claim(6, "a")
	r5 := sharedClaim(7, "a", 0)
	assert.Equal(t, []bool{true, true, false, false, false, false, false}, acquire(t, tab, r1, r2, w, r3, r4, w2, r5))

	p, _ := tab.Release(r1)
	assert.Empty(t, p, "a reader still holds")
	p, _ = tab.Release(r2)
	assert.Equal(t, []*Claim{w}, p, "the last reader's release grants the writer")
	p, _ = tab.Release(w)
	assert.Equal(t, []*Claim{r3, r4}, p, "the readers before the next writer, together")
	assert.Less(t, r3.Token(), r4.Token())
	p, _ = tab.Release(r3)
	assert.Empty(t, p)
	p, _ = tab.Release(r4)
	assert.Equal(t, []*Claim{w2}, p)
	p, _ = tab.Release(w2)
	assert.Equal(t, []*Claim{r5}, p)
}

// A waiter that leaves from the head lets in those behind it that fit: the
// readers queued behind a writer that gave up join the readers holding.
func TestLeavingWaiterLetsTheSharedBehindItIn(t *testing.T) {
	tab := New(&counter{})
	r1, w, r2, r3 := sharedClaim(1, "a", 0), claim(2, "a"), sharedClaim(3, "a", 0), sharedClaim(4, "a", 0)
	assert.Equal(t, []bool{true, false, false, false}, acquire(t, tab, r1, w, r2, r3))
	p, _ := tab.Release(w)
	assert.Equal(t, []*Claim{r2, r3}, p)
	heldBack, p, _ := tab.ReleaseHeldBack(r3)
	assert.True(t, heldBack, "a holder now, so held back")
	assert.Empty(t, p)
}

func TestSemaphoreGrantsAtMostLimit(t *testing.T) {
	tab := New(&counter{})
	cs := []*Claim{sharedClaim(1, "s", 3), sharedClaim(2, "s", 3), sharedClaim(3, "s", 3), sharedClaim(4, "s", 3)}
	assert.Equal(t, []bool{true, true, true, false}, acquire(t, tab, cs...))
	snap := tab.Snapshot()
	require.Len(t, snap, 1)
	assert.Equal(t, uint16(3), snap[0].Limit)
	assert.Len(t, snap[0].Holders, 3)
	require.Len(t, snap[0].Waiters, 1)
	assert.True(t, snap[0].Waiters[0].Shared)
	p, _ := tab.Release(cs[1])
	assert.Equal(t, []*Claim{cs[3]}, p, "a freed permit goes to the next claimant")
}

// Shared sessions agree on the limit while any is on the name; exclusive
// claims have no say, and once the last shared session is gone a new limit
// is taken.
func TestSharedSessionsAgreeOnTheLimit(t *testing.T) {
	tab := New(&counter{})
	w := claim(1, "s")
	s1 := sharedClaim(2, "s", 2)
	assert.Equal(t, []bool{true, false}, acquire(t, tab, w, s1))
	_, err := tab.Acquire(sharedClaim(3, "s", 3))
	assert.ErrorIs(t, err, ErrLimitMismatch, "a waiting shared session binds the limit")
	_, err = tab.Acquire(sharedClaim(4, "s", 0))
	assert.ErrorIs(t, err, ErrLimitMismatch, "no limit is a limit too")
	snap := tab.Snapshot()
	require.Len(t, snap, 1)
	assert.Len(t, snap[0].Waiters, 1, "a refused claim is not added")

	p, _ := tab.Release(w)
	assert.Equal(t, []*Claim{s1}, p)
	p, _ = tab.Release(s1)
	assert.Empty(t, p)
	assert.Zero(t, tab.Len())
	granted, err := tab.Acquire(sharedClaim(5, "s", 3))
	require.NoError(t, err, "nobody left: a new limit")
	assert.True(t, granted)
}

// A shared holder that went silent keeps its permit until its Release, and
// its limit; claims that fit beside it are still granted, and an exclusive
// claim waits for it.
func TestHeldBackSharedHolderKeepsItsPermit(t *testing.T) {
	tab := New(&counter{})
	s1, s2 := sharedClaim(1, "s", 2), sharedClaim(2, "s", 2)
	assert.Equal(t, []bool{true, true}, acquire(t, tab, s1, s2))
	heldBack, _, _ := tab.ReleaseHeldBack(s1)
	require.True(t, heldBack)
	s3 := sharedClaim(3, "s", 2)
	assert.Equal(t, []bool{false}, acquire(t, tab, s3), "its permit is still taken")
	p, _ := tab.Release(s2)
	assert.Equal(t, []*Claim{s3}, p, "a live holder's permit is free again")

	w := claim(4, "s")
	assert.Equal(t, []bool{false}, acquire(t, tab, w))
	snap := tab.Snapshot()
	require.Len(t, snap, 1)
	assert.Equal(t, 1, snap[0].HeldBack)
	assert.False(t, snap[0].Blocked, "shared claims that fit are still granted")
	assert.Len(t, snap[0].Holders, 1)
	p, _ = tab.Release(s3)
	assert.Empty(t, p, "the writer waits for the held-back holder too")
	p, _ = tab.Release(s1)
	assert.Equal(t, []*Claim{w}, p)

	// With only held-back holders left, their limit still binds: both
	// holders of a semaphore of 2 reset, and a claim that says 3 would
	// make a third holder of a name agreed at 2.
	tab2 := New(&counter{})
	a, b := sharedClaim(1, "t", 2), sharedClaim(2, "t", 2)
	acquire(t, tab2, a, b)
	tab2.ReleaseHeldBack(a)
	tab2.ReleaseHeldBack(b)
	_, err := tab2.Acquire(sharedClaim(3, "t", 3))
	assert.ErrorIs(t, err, ErrLimitMismatch)
	limit, bound := tab2.Limit("t")
	assert.Equal(t, uint16(2), limit)
	assert.True(t, bound)
	two := sharedClaim(4, "t", 2)
	assert.Equal(t, []bool{false}, acquire(t, tab2, two), "both permits are still taken")
	p, _ = tab2.Release(a)
	assert.Equal(t, []*Claim{two}, p)
	tab2.Release(b)
	tab2.Release(two)
	// Once the last of them is released, the name agrees to anything.
	assert.Equal(t, []bool{true}, acquire(t, tab2, sharedClaim(5, "t", 7)))
}

func TestBlockHoldsBackSharedClaims(t *testing.T) {
	tab := New(&counter{})
	require.True(t, tab.Block("a"))
	r1, r2 := sharedClaim(1, "a", 0), sharedClaim(2, "a", 0)
	assert.Equal(t, []bool{false, false}, acquire(t, tab, r1, r2))
	p, _ := tab.Regrant()
	assert.Empty(t, p)
	p, _ = tab.Unblock("a")
	assert.Equal(t, []*Claim{r1, r2}, p)
}

// A token failure in the middle of a promotion drops the claims it cannot
// grant and keeps the shared count right, so the limit binds nobody after.
func TestSharedPromotionTokenFailure(t *testing.T) {
	src := &counter{}
	tab := New(src)
	w := claim(1, "a")
	r1, r2 := sharedClaim(2, "a", 4), sharedClaim(3, "a", 4)
	acquire(t, tab, w, r1, r2)
	src.fail = true
	p, failed := tab.Release(w)
	assert.Empty(t, p)
	assert.Equal(t, []*Claim{r1, r2}, failed)
	assert.Zero(t, tab.Len())
	src.fail = false
	granted, err := tab.Acquire(sharedClaim(4, "a", 7))
	require.NoError(t, err)
	assert.True(t, granted)
}

// A lock's listing names at most MaxListed sessions of each kind and
// counts them all, so that a page's size follows the page, not the number
// of holders (17,500 shared holders made a one-lock page of 4.5 MB).
func TestListingIsBoundedPerLock(t *testing.T) {
	tab := New(&counter{})
	const live, heldBack, waiting = MaxListed + 50, MaxListed + 7, MaxListed + 3
	var claims []*Claim
	for i := range live + heldBack {
		c := sharedClaim(uint64(i+1), "pool", 0)
		claims = append(claims, c)
		acquire(t, tab, c)
	}
	for _, c := range claims[live:] {
		held, _, _ := tab.ReleaseHeldBack(c)
		require.True(t, held)
	}
	acquire(t, tab, claim(100000, "pool")) // a writer waits, and the readers behind it
	for i := range waiting - 1 {
		acquire(t, tab, sharedClaim(uint64(200000+i), "pool", 0))
	}
	page, _ := tab.Page("", 10)
	require.Len(t, page, 1)
	l := page[0]
	assert.Len(t, l.Holders, MaxListed)
	assert.Equal(t, live, l.HoldersTotal)
	assert.Len(t, l.HeldBackHolders, MaxListed)
	assert.Equal(t, heldBack, l.HeldBack)
	assert.Len(t, l.Waiters, MaxListed)
	assert.Equal(t, waiting, l.WaitersTotal)
	assert.Equal(t, uint64(1), l.Holders[0].Session, "in grant order")
	assert.Equal(t, uint64(live+1), l.HeldBackHolders[0].Session)
	_, held, waiters := tab.Counts()
	assert.Equal(t, 1, held)
	assert.Equal(t, waiting, waiters)
	// Once every live holder is gone the held-back ones still hold it.
	for _, c := range claims[:live] {
		tab.Release(c)
	}
	_, held, _ = tab.Counts()
	assert.Equal(t, 0, held, "held back only: not held by a live session")
}

// A lock's sessions page by kind: holders by token, held-back holders by
// token, waiters by arrival; a page goes on after the last key it gave,
// so a session that leaves between pages moves nobody into a page twice.
func TestSessionPage(t *testing.T) {
	tab := New(&counter{})
	var holders, waiters []*Claim
	for i := range 5 {
		c := &Claim{Session: uint64(i + 1), Name: "pool", Shared: true}
		_, err := tab.Acquire(c)
		require.NoError(t, err)
		holders = append(holders, c)
	}
	for i := range 3 {
		c := &Claim{Session: uint64(10 + i), Name: "pool"}
		_, err := tab.Acquire(c)
		require.NoError(t, err)
		waiters = append(waiters, c)
	}
	heldBack, _, _ := tab.ReleaseHeldBack(holders[1])
	require.True(t, heldBack)

	ids := func(es []Entry) (out []uint64) {
		for _, e := range es {
			out = append(out, e.Session)
		}
		return out
	}
	page, more, found := tab.SessionPage("pool", LiveHolders, 0, 2)
	require.True(t, found)
	assert.True(t, more)
	assert.Equal(t, []uint64{1, 3}, ids(page), "the held-back holder 2 is not a live one")
	tab.Release(holders[0]) // leaves between pages: nobody moves back into the next
	page, more, _ = tab.SessionPage("pool", LiveHolders, page[1].Token, 2)
	assert.False(t, more)
	assert.Equal(t, []uint64{4, 5}, ids(page))

	page, more, _ = tab.SessionPage("pool", HeldBackHolders, 0, 10)
	assert.False(t, more)
	assert.Equal(t, []uint64{2}, ids(page))

	page, more, _ = tab.SessionPage("pool", Waiters, 0, 1)
	assert.True(t, more)
	assert.Equal(t, []uint64{10}, ids(page))
	page, _, _ = tab.SessionPage("pool", Waiters, page[0].Arrival, 5)
	assert.Equal(t, []uint64{11, 12}, ids(page))

	_, _, found = tab.SessionPage("nobody", Waiters, 0, 5)
	assert.False(t, found)
}
