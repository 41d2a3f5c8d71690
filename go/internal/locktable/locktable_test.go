package locktable

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// counter is a TokenSource that can be told to fail.
type counter struct {
	n    uint64
	fail bool
}

func (c *counter) Next() (uint64, error) {
	if c.fail {
		return 0, errors.New("disk full")
	}
	c.n++
	return c.n, nil
}

func claim(id uint64, name string) *Claim { return &Claim{Session: id, Name: name} }

func TestFirstClaimIsGrantedOthersQueueFIFO(t *testing.T) {
	tab := New(&counter{})
	cs := []*Claim{claim(1, "a"), claim(2, "a"), claim(3, "a"), claim(4, "a")}
	for i, c := range cs {
		granted, err := tab.Acquire(c)
		require.NoError(t, err)
		assert.Equal(t, i == 0, granted)
	}
	assert.Equal(t, uint64(1), cs[0].Token())
	assert.Zero(t, cs[1].Token())

	for i := 1; i < len(cs); i++ {
		promoted, failed := tab.Release(cs[i-1])
		assert.Empty(t, failed)
		require.Equal(t, []*Claim{cs[i]}, promoted, "FIFO")
		assert.Equal(t, uint64(i+1), promoted[0].Token(), "+1 per grant")
	}
	promoted, _ := tab.Release(cs[3])
	assert.Empty(t, promoted)
	assert.Zero(t, tab.Len(), "an unused lock is forgotten")
}

func TestWaiterLeavingKeepsOthersInOrder(t *testing.T) {
	tab := New(&counter{})
	cs := make([]*Claim, 5)
	for i := range cs {
		cs[i] = claim(uint64(i+1), "q")
		_, err := tab.Acquire(cs[i])
		require.NoError(t, err)
	}
	// Leave from the middle, the tail and the head of the queue.
	for _, i := range []int{2, 4, 1} {
		promoted, _ := tab.Release(cs[i])
		assert.Empty(t, promoted, "a leaving waiter promotes nobody")
		promoted, _ = tab.Release(cs[i])
		assert.Empty(t, promoted, "release is idempotent")
	}
	snap := tab.Snapshot()
	require.Len(t, snap, 1)
	require.Len(t, snap[0].Waiters, 1)
	assert.Equal(t, uint64(4), snap[0].Waiters[0].Session)
	promoted, _ := tab.Release(cs[0])
	assert.Equal(t, []*Claim{cs[3]}, promoted)
}

func TestLocksAreIndependentAndNamesExact(t *testing.T) {
	tab := New(&counter{})
	for i, name := range []string{"a", "A", " a", "a "} {
		granted, err := tab.Acquire(claim(uint64(i), name))
		require.NoError(t, err)
		assert.True(t, granted, "%q is its own lock", name)
	}
	snap := tab.Snapshot()
	require.Len(t, snap, 4)
	assert.Equal(t, []string{" a", "A", "a", "a "},
		[]string{snap[0].Name, snap[1].Name, snap[2].Name, snap[3].Name}, "sorted")
}

func TestClosedTablePromotesNobody(t *testing.T) {
	tab := New(&counter{})
	h, w := claim(1, "x"), claim(2, "x")
	_, _ = tab.Acquire(h)
	_, _ = tab.Acquire(w)
	tab.Close()
	promoted, _ := tab.Release(h)
	assert.Empty(t, promoted)
	assert.Zero(t, w.Token())
	_, err := tab.Acquire(claim(3, "y"))
	assert.ErrorIs(t, err, ErrClosed)
	promoted, _ = tab.Release(w)
	assert.Empty(t, promoted)
	assert.Zero(t, tab.Len())
}

func TestTokenFailure(t *testing.T) {
	src := &counter{}
	tab := New(src)
	h := claim(1, "x")
	_, err := tab.Acquire(h)
	require.NoError(t, err)
	w1, w2 := claim(2, "x"), claim(3, "x")
	_, _ = tab.Acquire(w1)
	_, _ = tab.Acquire(w2)

	src.fail = true
	promoted, failed := tab.Release(h)
	assert.Empty(t, promoted)
	assert.Equal(t, []*Claim{w1, w2}, failed, "every waiter that could not be granted is handed back")
	assert.Zero(t, tab.Len())

	_, err = tab.Acquire(claim(4, "y"))
	require.Error(t, err)
	assert.Zero(t, tab.Len(), "a failed acquire leaves nothing behind")
	src.fail = false
	granted, err := tab.Acquire(claim(5, "y"))
	require.NoError(t, err)
	assert.True(t, granted)
}

func TestSnapshotCopiesHolderAndQueue(t *testing.T) {
	tab := New(&counter{})
	for i := 1; i <= 3; i++ {
		_, _ = tab.Acquire(claim(uint64(i), "n"))
	}
	snap := tab.Snapshot()
	require.Len(t, snap, 1)
	require.NotNil(t, snap[0].Holder)
	assert.Equal(t, uint64(1), snap[0].Holder.Session)
	assert.Equal(t, uint64(1), snap[0].Holder.Token)
	assert.False(t, snap[0].Holder.Since.IsZero())
	require.Len(t, snap[0].Waiters, 2)
	assert.Equal(t, []uint64{2, 3}, []uint64{snap[0].Waiters[0].Session, snap[0].Waiters[1].Session})
	assert.Zero(t, snap[0].Waiters[0].Token)
}

func BenchmarkAcquireRelease(b *testing.B) {
	tab := New(&counter{})
	cs := make([]*Claim, 64)
	for i := range cs {
		cs[i] = claim(uint64(i), fmt.Sprint("lock-", i%8))
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		c := cs[i%len(cs)]
		_, _ = tab.Acquire(c)
		if i%len(cs) == len(cs)-1 {
			for _, c := range cs {
				tab.Release(c)
			}
		}
	}
}

// A held-back exclusive holder (it went silent, lock delay running) keeps
// the lock from everybody, even a newcomer to an empty queue, until its
// Release; then FIFO as usual.
func TestReleaseHeldBackKeepsTheLockUntilRelease(t *testing.T) {
	tab := New(&counter{})
	holder, waiter := claim(1, "a"), claim(2, "a")
	_, err := tab.Acquire(holder)
	require.NoError(t, err)
	_, err = tab.Acquire(waiter)
	require.NoError(t, err)

	heldBack, promoted, _ := tab.ReleaseHeldBack(holder)
	assert.True(t, heldBack)
	assert.Empty(t, promoted)
	late := claim(3, "a")
	granted, err := tab.Acquire(late)
	require.NoError(t, err)
	assert.False(t, granted, "a held-back lock is granted to nobody")
	snap := tab.Snapshot()
	require.Len(t, snap, 1)
	assert.True(t, snap[0].Blocked)
	assert.Nil(t, snap[0].Holder)
	assert.Equal(t, 1, snap[0].HeldBack)
	assert.Len(t, snap[0].Waiters, 2)
	_, holders, waiters := tab.Counts()
	assert.Equal(t, 0, holders)
	assert.Equal(t, 2, waiters)

	heldBack, _, _ = tab.ReleaseHeldBack(holder)
	assert.True(t, heldBack, "held back already: still its place")
	promoted, failed := tab.Release(holder)
	assert.Empty(t, failed)
	assert.Equal(t, []*Claim{waiter}, promoted)
	assert.Equal(t, uint64(2), waiter.Token())
	p2, _ := tab.Release(holder)
	assert.Empty(t, p2, "a second Release is a no-op")
}

// A lock whose queue emptied while its holder was held back is forgotten
// at the holder's Release; a waiter's ReleaseHeldBack is an ordinary leave.
func TestHeldBackLockIsForgottenAtRelease(t *testing.T) {
	tab := New(&counter{})
	holder, waiter := claim(1, "a"), claim(2, "a")
	_, _ = tab.Acquire(holder)
	_, _ = tab.Acquire(waiter)
	heldBack, _, _ := tab.ReleaseHeldBack(waiter)
	assert.False(t, heldBack)
	heldBack, _, _ = tab.ReleaseHeldBack(holder)
	assert.True(t, heldBack)
	assert.Equal(t, 1, tab.Len(), "a held-back lock stays listed")
	promoted, _ := tab.Release(holder)
	assert.Empty(t, promoted)
	assert.Equal(t, 0, tab.Len())
}

// Block holds back a lock nobody holds (a restarted server, for a holder
// of its previous run): claims queue, Regrant passes it by, and Unblock
// grants the first. An already blocked lock is left alone.
func TestBlockHoldsBackAFreeLock(t *testing.T) {
	tab := New(&counter{})
	assert.True(t, tab.Block("a"))
	assert.False(t, tab.Block("a"), "blocked already")
	snap := tab.Snapshot()
	require.Len(t, snap, 1, "a blocked lock is listed although nobody claims it")
	assert.True(t, snap[0].Blocked)
	first, second := claim(1, "a"), claim(2, "a")
	for _, c := range []*Claim{first, second} {
		granted, err := tab.Acquire(c)
		require.NoError(t, err)
		assert.False(t, granted)
	}
	promoted, _ := tab.Regrant()
	assert.Empty(t, promoted, "Regrant does not end a block")
	p, failed := tab.Unblock("a")
	assert.Empty(t, failed)
	assert.Equal(t, []*Claim{first}, p)
	assert.Equal(t, uint64(1), first.Token())
	_, _ = tab.Release(first)
	_, _ = tab.Release(second)

	assert.True(t, tab.Block("b"))
	p, _ = tab.Unblock("b")
	assert.Empty(t, p)
	assert.Equal(t, 0, tab.Len(), "unblocked with nobody waiting: forgotten")
}

// slowDisk is a TokenSource whose tokens are "not yet" while pending.
type slowDisk struct {
	n       uint64
	pending bool
}

type notYet struct{}

func (notYet) Error() string   { return "no token reserved yet" }
func (notYet) Temporary() bool { return true }

func (s *slowDisk) Next() (uint64, error) {
	if s.pending {
		return 0, notYet{}
	}
	s.n++
	return s.n, nil
}

// While the token source has nothing to give, a release promotes nobody and
// new claims on a free lock queue: nobody is dropped. Regrant then hands the
// lock out in arrival order.
func TestNoTokenYetKeepsTheQueue(t *testing.T) {
	disk := &slowDisk{}
	tab := New(disk)
	holder, w1, w2 := claim(1, "a"), claim(2, "a"), claim(3, "a")
	_, err := tab.Acquire(holder)
	require.NoError(t, err)
	for _, w := range []*Claim{w1, w2} {
		granted, err := tab.Acquire(w)
		require.NoError(t, err)
		require.False(t, granted)
	}
	disk.pending = true
	promoted, failed := tab.Release(holder)
	assert.Empty(t, promoted)
	assert.Empty(t, failed, "a temporary failure drops nobody")
	fresh := claim(4, "b")
	granted, err := tab.Acquire(fresh)
	require.NoError(t, err, "a free lock without tokens queues the claim")
	assert.False(t, granted)
	promoted2, failed2 := tab.Regrant()
	assert.Empty(t, promoted2, "still no tokens")
	assert.Empty(t, failed2)

	disk.pending = false
	promoted2, failed2 = tab.Regrant()
	assert.Empty(t, failed2)
	require.Len(t, promoted2, 2)
	assert.ElementsMatch(t, []*Claim{w1, fresh}, promoted2, "the first waiter of each lock")
	p, _ := tab.Release(w1)
	assert.Equal(t, []*Claim{w2}, p, "FIFO kept")
}

// A held lock can be blocked too (a new leader, for a claim of the term
// before that is about to end): the holder's release grants nobody, and
// Unblock grants the first waiter.
func TestBlockOfAHeldLockOutlastsItsHolder(t *testing.T) {
	tab := New(&counter{})
	holder, waiter := claim(1, "a"), claim(2, "a")
	granted, err := tab.Acquire(holder)
	require.NoError(t, err)
	require.True(t, granted)
	assert.True(t, tab.Block("a"))
	p, _ := tab.Unblock("a")
	assert.Empty(t, p, "Unblock of a held lock grants nobody")
	assert.True(t, tab.Block("a"))
	granted, err = tab.Acquire(waiter)
	require.NoError(t, err)
	assert.False(t, granted)
	p, _ = tab.Release(holder)
	assert.Empty(t, p, "the holder's release left the lock blocked")
	assert.Zero(t, waiter.Token())
	p, _ = tab.Unblock("a")
	assert.Equal(t, []*Claim{waiter}, p)
	_, _ = tab.Release(waiter)
	assert.Equal(t, 0, tab.Len())
}

// Pages walk the table in name order from a cursor: every lock once, as
// Snapshot has it, whatever the page size; more is false on the last page.
func TestPageWalksInNameOrder(t *testing.T) {
	tab := New(&counter{})
	const n = 103
	for i := range n {
		_, err := tab.Acquire(claim(uint64(i+1), fmt.Sprintf("lock/%03d", (i*37)%n)))
		require.NoError(t, err)
	}
	_, err := tab.Acquire(claim(1000, "lock/050")) // a waiter is listed with its lock
	require.NoError(t, err)
	want := tab.Snapshot()
	for _, limit := range []int{1, 7, 50, n, n + 1, 1000} {
		var got []LockInfo
		after, pages := "", 0
		for {
			page, more := tab.Page(after, limit)
			pages++
			require.LessOrEqual(t, len(page), limit)
			got = append(got, page...)
			if !more {
				break
			}
			require.Len(t, page, limit, "only the last page is short")
			after = page[len(page)-1].Name
		}
		assert.Equal(t, want, got, "limit %d", limit)
		assert.Equal(t, (n+limit-1)/limit, pages, "limit %d", limit)
	}
	page, more := tab.Page("lock/050", 1)
	require.Len(t, page, 1)
	assert.Equal(t, "lock/051", page[0].Name, "after is exclusive")
	assert.True(t, more)
	page, more = tab.Page("lock/049", 1)
	require.Len(t, page[0].Waiters, 1)
	assert.True(t, more)
	page, more = tab.Page("zzz", 10)
	assert.Empty(t, page)
	assert.False(t, more)
	page, more = tab.Page("", 0)
	assert.Empty(t, page)
	assert.False(t, more)
}
