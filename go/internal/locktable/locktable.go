// Package locktable is the server's lock state: who holds each named lock and
// who queues for it, in arrival order.
//
// The table only decides; it never does I/O. Operations that grant a lock
// return the claims that were granted so the caller can tell their sessions,
// outside the table's mutex. A granted claim carries its fencing token from
// the moment of the decision, so a heartbeat answered concurrently already
// sees the grant.
package locktable

import (
	"cmp"
	"container/heap"
	"errors"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed is returned by Acquire once the table is closed for shutdown.
var ErrClosed = errors.New("locktable: closed")

// TokenSource issues fencing tokens; tokenstore.Store implements it. An
// error with a Temporary() method that reports true means "none yet": the
// claim stays queued, and Regrant grants it once tokens are back.
type TokenSource interface {
	Next() (uint64, error)
}

// temporary reports whether a token error means "try again later".
func temporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// ErrLimitMismatch is returned by Acquire for a shared claim whose limit
// differs from the limit of the shared sessions already on its name.
var ErrLimitMismatch = errors.New("locktable: limit differs from the lock's")

// Claim is one session's claim on one lock name: holding it or queued for it.
// The server keeps one per session; the table links it into the lock's
// holders or its queue.
type Claim struct {
	// Session identifies the owning session (for snapshots and kicks).
	Session uint64
	// Name is the lock name.
	Name string
	// Shared claims hold the lock beside other shared claims, at most
	// Limit of them at once (0: any number); an exclusive claim holds it
	// alone. Set before Acquire, never changed after.
	Shared bool
	Limit  uint16

	token   atomic.Uint64 // 0 while waiting; set once on grant
	since   int64         // when queued, then when granted (UnixNano); guarded by Table.mu
	arrival uint64        // the claim's place in the order of Acquire calls; guarded by Table.mu

	lock       *lock  // nil when not in the table; guarded by Table.mu
	held       bool   // in lock's holders, else in its queue; guarded by Table.mu
	heldBack   bool   // a holder whose session ended, kept until Release; guarded by Table.mu
	prev, next *Claim // holder list or waiter queue links; guarded by Table.mu
}

// Token returns the claim's fencing token, or 0 while it is waiting.
func (c *Claim) Token() uint64 { return c.token.Load() }

// Arrival is the claim's place in the order of Acquire calls, set once
// when it enters the table (read it after that, under whatever ordered
// the entry before the read).
func (c *Claim) Arrival() uint64 { return c.arrival }

// lock is one named lock: its holders and a FIFO queue of waiters, each an
// intrusive list so that leaving is O(1) and allocation-free.
//
// Claims are granted strictly in arrival order: the head of the queue is
// granted when it fits, then the next while it fits; a claim that does not
// fit stops the scan, so a waiting exclusive claim is never overtaken by a
// stream of shared ones.
type lock struct {
	holders claimList // held back ones included: they still count
	queue   claimList
	// shared counts the shared claims on the lock, holders (held back
	// ones too: they still take a permit) and waiters; while there are
	// any, a shared claim must state limit, or a name agreed at 2 could
	// be let to 3 while two held-back holders keep their permits.
	shared int32
	limit  uint16
	// heldBack counts the holders held back (ReleaseHeldBack).
	heldBack int32
	// exclusive: the holders (one) hold exclusively.
	exclusive bool
	// blocked keeps the lock from being granted to anyone until Unblock:
	// a holder of the server's previous run, or of an HA cell's previous
	// leader, may still count on it.
	blocked bool
}

// fits reports whether c may hold l beside its current holders.
func (l *lock) fits(c *Claim) bool {
	switch {
	case l.holders.n == 0:
		return true
	case l.exclusive || !c.Shared:
		return false
	}
	return l.limit == 0 || l.holders.n < int32(l.limit)
}

// Table maps lock names to their holders and waiters. It is safe for
// concurrent use.
type Table struct {
	tokens TokenSource
	now    func() time.Time

	mu       sync.Mutex
	locks    map[string]*lock
	arrivals uint64 // Acquire calls so far: each claim's arrival number
	closed   bool
}

// New returns an empty table that takes tokens from tokens.
func New(tokens TokenSource) *Table {
	return &Table{tokens: tokens, now: time.Now, locks: make(map[string]*lock)}
}

// TokensInHand reports whether the token source issues its next token
// without waiting for a write. A source that cannot tell (a counter in
// tests) never waits.
func (t *Table) TokensInHand() bool {
	if s, ok := t.tokens.(interface{ InHand() bool }); ok {
		return s.InHand()
	}
	return true
}

// Acquire adds c to the table under c.Name. If c fits now and nobody waits
// before it, c is granted at once and granted is true; otherwise c joins
// the end of the queue. An error means c was not added: ErrClosed,
// ErrLimitMismatch, or the token source failed.
func (t *Table) Acquire(c *Claim) (granted bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false, ErrClosed
	}
	if c.lock != nil {
		panic("locktable: claim acquired twice")
	}
	t.arrivals++
	c.arrival = t.arrivals
	l := t.locks[c.Name]
	if l == nil {
		l = &lock{}
		t.locks[c.Name] = l
	}
	if c.Shared {
		if l.shared > 0 && c.Limit != l.limit {
			return false, ErrLimitMismatch
		}
		l.limit = c.Limit
		l.shared++
	}
	if !l.blocked && l.queue.head == nil && l.fits(c) {
		err := t.grant(l, c)
		if err == nil {
			return true, nil
		}
		if !temporary(err) {
			if c.Shared {
				l.shared--
			}
			t.dropIfEmpty(c.Name, l)
			return false, err
		}
		// No token right now (the disk is slow or failing): queue, and
		// Regrant hands the lock out in arrival order once tokens are back.
	}
	c.lock = l
	c.since = t.now().UnixNano()
	l.queue.pushBack(c)
	return false, nil
}

// grant makes c a holder of l with a fresh token. Caller holds t.mu.
func (t *Table) grant(l *lock, c *Claim) error {
	tok, err := t.tokens.Next()
	if err != nil {
		return err
	}
	c.token.Store(tok)
	c.since = t.now().UnixNano()
	c.lock, c.held = l, true
	l.holders.pushBack(c)
	l.exclusive = !c.Shared
	return nil
}

// Release removes c from the table (a no-op if it is not in it), a holder
// held back by ReleaseHeldBack included. Whoever fits after it is granted
// at once, in queue order, unless the table is closed or the lock blocked:
// a leaving waiter can let those behind it in too (shared claims behind
// a waiting exclusive one). It returns the promoted claims. Waiters the
// token source refused are returned in failed: they are out of the table
// and their sessions must end.
func (t *Table) Release(c *Claim) (promoted, failed []*Claim) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c.lock == nil {
		return nil, nil
	}
	return t.releaseLocked(c)
}

// releaseLocked is Release for a claim in the table. Caller holds t.mu.
func (t *Table) releaseLocked(c *Claim) (promoted, failed []*Claim) {
	l := c.lock
	t.remove(l, c)
	if !l.blocked {
		promoted, failed = t.promote(l)
	}
	t.dropIfEmpty(c.Name, l)
	return promoted, failed
}

// remove takes c out of l's holders or queue. Caller holds t.mu.
func (t *Table) remove(l *lock, c *Claim) {
	if c.Shared {
		l.shared--
	}
	if c.held {
		l.holders.remove(c)
	} else {
		l.queue.remove(c)
	}
	if c.heldBack {
		l.heldBack--
	}
	c.lock, c.held, c.heldBack = nil, false, false
}

// ReleaseHeldBack ends c's session in the table: a waiter leaves as with
// Release, while a holder stays a holder, held back, until Release(c):
// a holder that went silent may still be touching the resource (the
// server's lock delay). Nobody who would not fit beside c is granted the
// lock meanwhile; shared claims that fit still are, and only with c's
// limit (ErrLimitMismatch otherwise). It reports whether c
// was held back, with Release's results for a waiter that left.
func (t *Table) ReleaseHeldBack(c *Claim) (heldBack bool, promoted, failed []*Claim) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := c.lock
	if l == nil {
		return false, nil, nil
	}
	if !c.held {
		promoted, failed = t.releaseLocked(c)
		return false, promoted, failed
	}
	if !c.heldBack {
		c.heldBack = true // still a shared claim: its limit binds the name
		l.heldBack++
	}
	return true, nil, nil
}

// AddHeldBack puts c among the holders of c.Name, held back, with no
// token: a shared holder of the server's previous run that may still
// count on one of the lock's permits after a clean stop. Claims that fit
// beside it are granted; it leaves with Release. c must be shared, with
// the limit of the name's other shared claims (ErrLimitMismatch), and
// nobody may hold the name exclusively.
func (t *Table) AddHeldBack(c *Claim) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c.lock != nil || !c.Shared || c.Limit == 0 {
		panic("locktable: AddHeldBack of a claim that is in the table, exclusive or without a limit")
	}
	l := t.locks[c.Name]
	if l == nil {
		l = &lock{}
		t.locks[c.Name] = l
	}
	if (l.shared > 0 && l.limit != c.Limit) || (l.holders.n > 0 && l.exclusive) {
		t.dropIfEmpty(c.Name, l)
		return ErrLimitMismatch
	}
	t.arrivals++
	c.arrival = t.arrivals
	c.since = t.now().UnixNano()
	l.limit = c.Limit
	l.shared++
	l.heldBack++
	c.lock, c.held, c.heldBack = l, true, true
	l.holders.pushBack(c)
	l.exclusive = false
	return nil
}

// Block holds name back: nobody is granted it until Unblock(name), whoever
// holds it now. A server restarted after a crash, or a new leader of an
// HA cell, does this for each lock that a holder it does not know may
// still count on. New claims queue; a holder's release leaves the lock
// blocked. It reports false, and changes nothing, if the lock is blocked
// already.
func (t *Table) Block(name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.locks[name]
	if l == nil {
		l = &lock{}
		t.locks[name] = l
	}
	if l.blocked {
		return false
	}
	l.blocked = true
	return true
}

// Unblock ends the block that Block put on name and grants the lock to
// the waiters that fit, unless the table is closed. Its results are those
// of Release.
func (t *Table) Unblock(name string) (promoted, failed []*Claim) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.locks[name]
	if l == nil || !l.blocked {
		return nil, nil
	}
	l.blocked = false
	promoted, failed = t.promote(l)
	t.dropIfEmpty(name, l)
	return promoted, failed
}

// promote grants l to its waiters in queue order while the head fits and
// gets a token. Caller holds t.mu.
func (t *Table) promote(l *lock) (promoted, failed []*Claim) {
	if t.closed {
		return nil, nil
	}
	for l.queue.head != nil && l.fits(l.queue.head) {
		next := l.queue.head
		l.queue.remove(next)
		err := t.grant(l, next)
		if err == nil {
			promoted = append(promoted, next)
			continue
		}
		if temporary(err) {
			l.queue.pushFront(next) // keeps its place; Regrant tries again
			return promoted, failed
		}
		next.lock = nil
		if next.Shared {
			l.shared--
		}
		failed = append(failed, next)
	}
	return promoted, failed
}

// Regrant grants every unblocked lock to the waiters that fit: after the
// token source had none to give and has some again. It returns the
// promoted claims, and the waiters the source refused for good.
func (t *Table) Regrant() (promoted, failed []*Claim) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for name, l := range t.locks {
		if l.blocked || l.queue.head == nil {
			continue
		}
		p, f := t.promote(l)
		failed = append(failed, f...)
		promoted = append(promoted, p...)
		t.dropIfEmpty(name, l)
	}
	return promoted, failed
}

// claimList is an intrusive doubly linked list of claims, through their
// prev and next: a lock's holders, or its queue. A claim is in one list
// at most, so leaving either is O(1) and allocation-free.
type claimList struct {
	head, tail *Claim
	n          int32
}

func (q *claimList) pushBack(c *Claim) {
	c.prev, c.next = q.tail, nil
	if q.tail != nil {
		q.tail.next = c
	} else {
		q.head = c
	}
	q.tail = c
	q.n++
}

func (q *claimList) pushFront(c *Claim) {
	c.prev, c.next = nil, q.head
	if q.head != nil {
		q.head.prev = c
	} else {
		q.tail = c
	}
	q.head = c
	q.n++
}

func (q *claimList) remove(c *Claim) {
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		q.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		q.tail = c.prev
	}
	c.prev, c.next = nil, nil
	q.n--
}

// dropIfEmpty forgets a lock nobody holds or waits for, so the map only
// holds live names. Caller holds t.mu.
func (t *Table) dropIfEmpty(name string, l *lock) {
	if l.holders.n == 0 && l.queue.head == nil && !l.blocked && t.locks[name] == l {
		delete(t.locks, name)
	}
}

// Close stops all grants: from now on Acquire fails with ErrClosed and
// Release promotes nobody. Used for shutdown.
func (t *Table) Close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
}

// Entry describes one session in a snapshot.
type Entry struct {
	Session uint64
	Token   uint64    // 0 for waiters
	Since   time.Time // granted at (holder) or queued at (waiter)
	Shared  bool      // a shared claim, else an exclusive one
	// Arrival orders the claims by their Acquire: a lock's queue is in
	// its order (and its holders in token order), so either is where a
	// page of a lock's sessions goes on from.
	Arrival uint64
	Limit   uint16 // a shared claim's limit
	// HeldBack: a holder whose session ended, kept until its hold ends.
	HeldBack bool
}

// LockInfo describes one lock in a snapshot.
type LockInfo struct {
	Name string
	// Shared: the lock is held by shared claims; Limit is the limit the
	// shared sessions on it agreed on (0: none).
	Shared bool
	Limit  uint16
	// Holder is the first of Holders, nil when there are none.
	Holder  *Entry
	Holders []Entry // the holders whose sessions are live, in grant order: at most MaxListed
	// HoldersTotal and WaitersTotal count them all, listed or not.
	HoldersTotal, WaitersTotal int
	// HeldBack counts the holders whose sessions ended without a release
	// and whose places are kept for the lock delay; HeldBackHolders are
	// they, in grant order.
	HeldBack        int
	HeldBackHolders []Entry // at most MaxListed of them
	Waiters         []Entry // in queue order
	// Blocked: nobody may be granted the lock yet, because an exclusive
	// holder went silent and the lock delay has not passed, or a holder
	// of the server's previous run may still count on it.
	Blocked bool
}

// Snapshot returns every live lock, sorted by name, with its holder and
// waiters in queue order. It is a copy: safe to keep and to serialise.
func (t *Table) Snapshot() []LockInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]LockInfo, 0, len(t.locks))
	for name, l := range t.locks {
		out = append(out, t.infoLocked(name, l))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Page returns up to limit live locks whose names sort after after (all of
// them from the start for ""), in name order, as Snapshot describes them;
// more reports whether further locks follow the last one.
//
// The table is a hash map, not a sorted index, on purpose: Acquire and
// Release run for every claim and stay O(1), while a listing is a rare
// operator's read. A page is therefore a selection: one pass over the map
// keeps the limit+1 smallest names above after in a bounded max-heap, so a
// page costs O(n log limit) time under the mutex (15,000 locks: about a
// millisecond) and O(limit) memory, never a copy of the whole table. A
// walk through every page costs n/limit passes; the admin API caps how
// many run at once.
func (t *Table) Page(after string, limit int) (page []LockInfo, more bool) {
	if limit <= 0 {
		return nil, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	h := make(pageHeap, 0, min(limit+1, len(t.locks)))
	for name, l := range t.locks {
		if name <= after {
			continue
		}
		if len(h) <= limit {
			heap.Push(&h, pageEntry{name, l})
		} else if name < h[0].name {
			h[0] = pageEntry{name, l}
			heap.Fix(&h, 0)
		}
	}
	if len(h) > limit {
		heap.Pop(&h) // the largest: only says that more follow
		more = true
	}
	slices.SortFunc(h, func(a, b pageEntry) int { return cmp.Compare(a.name, b.name) })
	page = make([]LockInfo, 0, len(h))
	for _, e := range h {
		page = append(page, t.infoLocked(e.name, e.lock))
	}
	return page, more
}

// pageEntry is a lock selected for a page.
type pageEntry struct {
	name string
	lock *lock
}

// pageHeap is a max-heap by name: its root is the largest name kept.
type pageHeap []pageEntry

func (h pageHeap) Len() int           { return len(h) }
func (h pageHeap) Less(i, j int) bool { return h[i].name > h[j].name }
func (h pageHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *pageHeap) Push(x any)        { *h = append(*h, x.(pageEntry)) }
func (h *pageHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// MaxListed bounds each list of sessions in a LockInfo (live holders,
// held-back holders, waiters): a lock may have thousands of shared holders,
// and a listing page must stay small however many. The totals count them
// all.
const MaxListed = 100

// infoLocked describes l for a snapshot or a page, listing at most
// MaxListed sessions of each kind: its cost follows that, not the number
// of holders. Caller holds t.mu.
func (t *Table) infoLocked(name string, l *lock) LockInfo {
	info := LockInfo{Name: name, Shared: l.holders.n > 0 && !l.exclusive,
		HeldBack: int(l.heldBack), HoldersTotal: int(l.holders.n - l.heldBack), WaitersTotal: int(l.queue.n)}
	if l.shared > 0 || info.Shared {
		info.Limit = l.limit
	}
	info.Holders = make([]Entry, 0, min(info.HoldersTotal, MaxListed))
	wantLive, wantHeldBack := min(info.HoldersTotal, MaxListed), min(info.HeldBack, MaxListed)
	for h := l.holders.head; h != nil && (len(info.Holders) < wantLive || len(info.HeldBackHolders) < wantHeldBack); h = h.next {
		switch {
		case h.heldBack && len(info.HeldBackHolders) < wantHeldBack:
			info.HeldBackHolders = append(info.HeldBackHolders, entry(h))
		case !h.heldBack && len(info.Holders) < wantLive:
			info.Holders = append(info.Holders, entry(h))
		}
	}
	if len(info.Holders) > 0 {
		info.Holder = &info.Holders[0]
	}
	info.Blocked = l.blocked || (info.HeldBack > 0 && l.exclusive)
	info.Waiters = make([]Entry, 0, min(info.WaitersTotal, MaxListed))
	for w := l.queue.head; w != nil && len(info.Waiters) < MaxListed; w = w.next {
		info.Waiters = append(info.Waiters, entry(w))
	}
	return info
}

func entry(c *Claim) Entry {
	return Entry{Session: c.Session, Token: c.token.Load(), Since: time.Unix(0, c.since), Shared: c.Shared,
		Arrival: c.arrival, Limit: c.Limit, HeldBack: c.heldBack}
}

// Whole returns every holder of name (held back ones too) in grant order
// and every waiter in queue order, and whether the name is blocked: the
// state a watch starts from. Its cost follows the lock's claims.
func (t *Table) Whole(name string) (holders, waiters []Entry, blocked bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.locks[name]
	if l == nil {
		return nil, nil, false
	}
	for h := l.holders.head; h != nil; h = h.next {
		holders = append(holders, entry(h))
	}
	for w := l.queue.head; w != nil; w = w.next {
		waiters = append(waiters, entry(w))
	}
	return holders, waiters, l.blocked
}

// SessionKind is which of a lock's sessions SessionPage lists.
type SessionKind uint8

const (
	LiveHolders     SessionKind = iota // holders whose sessions are live, by token
	HeldBackHolders                    // holders held back (ReleaseHeldBack), by token
	Waiters                            // the queue, in order (by arrival)
)

// SessionPage lists up to limit sessions of kind on name whose key is
// above after (the token of a holder, the arrival of a waiter; 0 for the
// first page), in the lock's order, and whether more follow; found is
// false when nobody holds or waits for name. The holders are in token
// order and the queue in arrival order, so a walk of the pages lists no
// session twice and none out of order while the lock changes between
// them; one page costs a walk of the list up to it, under the table's
// mutex, and its sessions (at most limit).
func (t *Table) SessionPage(name string, kind SessionKind, after uint64, limit int) (page []Entry, more, found bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.locks[name]
	if l == nil || limit <= 0 {
		return nil, false, l != nil
	}
	list, key := l.holders.head, func(c *Claim) uint64 { return c.token.Load() }
	if kind == Waiters {
		list, key = l.queue.head, func(c *Claim) uint64 { return c.arrival }
	}
	for c := list; c != nil; c = c.next {
		// after 0 is the first page: a previous run's held-back holder
		// (AddHeldBack) has no token, and is first.
		if (after > 0 && key(c) <= after) || (kind == LiveHolders && c.heldBack) || (kind == HeldBackHolders && !c.heldBack) {
			continue
		}
		if len(page) == limit {
			return page, true, true
		}
		page = append(page, entry(c))
	}
	return page, false, true
}

// Counts returns the number of live locks, of held locks (by a live
// session) and of queued waiters, for gauges read at scrape time.
func (t *Table) Counts() (locks, held, waiters int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, l := range t.locks {
		if l.holders.n > l.heldBack {
			held++
		}
		waiters += int(l.queue.n)
	}
	return len(t.locks), held, waiters
}

// Limit returns the limit that the shared sessions on name agreed on, and
// whether there are any (bound false: a shared claim may state any limit).
func (t *Table) Limit(name string) (limit uint16, bound bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if l := t.locks[name]; l != nil && l.shared > 0 {
		return l.limit, true
	}
	return 0, false
}

// Len returns the number of live locks.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.locks)
}
