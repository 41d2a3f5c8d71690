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

// Claim is one session's claim on one lock name: holding it or queued for it.
// The server keeps one per session; the table links it into the lock's queue.
type Claim struct {
	// Session identifies the owning session (for snapshots and kicks).
	Session uint64
	// Name is the lock name.
	Name string

	token atomic.Uint64 // 0 while waiting; set once on grant
	since int64         // when queued, then when granted (UnixNano); guarded by Table.mu

	lock       *lock  // nil when not in the table; guarded by Table.mu
	prev, next *Claim // waiter queue links; guarded by Table.mu
}

// Token returns the claim's fencing token, or 0 while it is waiting.
func (c *Claim) Token() uint64 { return c.token.Load() }

// lock is one named lock: a holder and a FIFO queue of waiters, kept as an
// intrusive list so that leaving the queue is O(1) and allocation-free.
type lock struct {
	holder     *Claim
	head, tail *Claim
	waiters    int32 // with blocked, fits the lock in 32 bytes: one per held name
	// blocked keeps a lock whose holder went silent from being granted until
	// Unblock (the server's lock delay): a holder that vanished may still be
	// touching the resource. So does Block, for a holder of the server's
	// previous run.
	blocked bool
}

// Table maps lock names to their holder and waiters. It is safe for
// concurrent use.
type Table struct {
	tokens TokenSource
	now    func() time.Time

	mu     sync.Mutex
	locks  map[string]*lock
	closed bool
}

// New returns an empty table that takes tokens from tokens.
func New(tokens TokenSource) *Table {
	return &Table{tokens: tokens, now: time.Now, locks: make(map[string]*lock)}
}

// Acquire adds c to the table under c.Name. If the lock is free, c is granted
// at once and granted is true; otherwise c joins the end of the queue. An
// error means c was not added: ErrClosed, or the token source failed.
func (t *Table) Acquire(c *Claim) (granted bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false, ErrClosed
	}
	if c.lock != nil {
		panic("locktable: claim acquired twice")
	}
	l := t.locks[c.Name]
	if l == nil {
		l = &lock{}
		t.locks[c.Name] = l
	}
	if l.holder == nil && !l.blocked && l.head == nil {
		err := t.grant(l, c)
		if err == nil {
			return true, nil
		}
		if !temporary(err) {
			t.dropIfEmpty(c.Name, l)
			return false, err
		}
		// No token right now (the disk is slow or failing): queue, and
		// Regrant hands the lock out in arrival order once tokens are back.
	}
	c.lock = l
	c.since = t.now().UnixNano()
	c.prev = l.tail
	if l.tail != nil {
		l.tail.next = c
	} else {
		l.head = c
	}
	l.tail = c
	l.waiters++
	return false, nil
}

// grant makes c the holder of l with a fresh token. Caller holds t.mu.
func (t *Table) grant(l *lock, c *Claim) error {
	tok, err := t.tokens.Next()
	if err != nil {
		return err
	}
	c.token.Store(tok)
	c.since = t.now().UnixNano()
	c.lock = l
	l.holder = c
	return nil
}

// Release removes c from the table (a no-op if it is not in it). If c held
// the lock, the first waiter is granted at once, unless the table is closed.
// It returns the promoted claim, or nil. Waiters the token source refused are
// returned in failed: they are out of the table and their sessions must end.
func (t *Table) Release(c *Claim) (promoted *Claim, failed []*Claim) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := c.lock
	if l == nil {
		return nil, nil
	}
	c.lock = nil
	if l.holder != c {
		t.unlink(l, c)
		t.dropIfEmpty(c.Name, l)
		return nil, nil
	}
	l.holder = nil
	if !l.blocked { // else Unblock grants it
		promoted, failed = t.promote(l)
	}
	t.dropIfEmpty(c.Name, l)
	return promoted, failed
}

// ReleaseBlocked removes c from the table like Release, except that if c held
// the lock nobody is granted it until Unblock(c.Name): new claims queue
// behind the absent holder. It reports whether the lock was blocked (false if
// c was only waiting, or not in the table).
func (t *Table) ReleaseBlocked(c *Claim) (blocked bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := c.lock
	if l == nil {
		return false
	}
	c.lock = nil
	if l.holder != c {
		t.unlink(l, c)
		t.dropIfEmpty(c.Name, l)
		return false
	}
	l.holder = nil
	l.blocked = true
	return true
}

// Block holds name back as ReleaseBlocked does, although nobody (or a
// claim that is about to end) holds it: a server restarted after a crash,
// or a new leader of an HA cell, does this for each lock that a holder it
// does not know may still count on. New claims queue until Unblock(name);
// a holder's release leaves the lock blocked. It reports false, and
// changes nothing, if the lock is blocked already.
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

// Unblock ends the block that ReleaseBlocked or Block put on name and
// grants the lock to the first waiter, unless the table is closed. Its
// results are those of Release.
func (t *Table) Unblock(name string) (promoted *Claim, failed []*Claim) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.locks[name]
	if l == nil || !l.blocked {
		return nil, nil
	}
	l.blocked = false
	if l.holder == nil {
		promoted, failed = t.promote(l)
	}
	t.dropIfEmpty(name, l)
	return promoted, failed
}

// promote grants the free lock l to its first waiter that can get a token.
// Caller holds t.mu.
func (t *Table) promote(l *lock) (promoted *Claim, failed []*Claim) {
	if t.closed {
		return nil, nil
	}
	for l.head != nil {
		next := l.head
		t.unlink(l, next)
		err := t.grant(l, next)
		if err == nil {
			return next, failed
		}
		if temporary(err) {
			t.pushFront(l, next) // keeps its place; Regrant tries again
			return nil, failed
		}
		next.lock = nil
		failed = append(failed, next)
	}
	return nil, failed
}

// pushFront puts waiter c back at the head of l's queue. Caller holds t.mu.
func (t *Table) pushFront(l *lock, c *Claim) {
	c.lock, c.prev, c.next = l, nil, l.head
	if l.head != nil {
		l.head.prev = c
	} else {
		l.tail = c
	}
	l.head = c
	l.waiters++
}

// Regrant grants every free, unblocked lock that has waiters to its first
// waiter: after the token source had none to give and has some again. It
// returns the promoted claims, and the waiters the source refused for good.
func (t *Table) Regrant() (promoted, failed []*Claim) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for name, l := range t.locks {
		if l.holder != nil || l.blocked || l.head == nil {
			continue
		}
		p, f := t.promote(l)
		failed = append(failed, f...)
		if p != nil {
			promoted = append(promoted, p)
		}
		t.dropIfEmpty(name, l)
	}
	return promoted, failed
}

// unlink removes waiter c from l's queue. Caller holds t.mu.
func (t *Table) unlink(l *lock, c *Claim) {
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		l.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		l.tail = c.prev
	}
	c.prev, c.next = nil, nil
	l.waiters--
}

// dropIfEmpty forgets a lock nobody holds or waits for, so the map only
// holds live names. Caller holds t.mu.
func (t *Table) dropIfEmpty(name string, l *lock) {
	if l.holder == nil && l.head == nil && !l.blocked && t.locks[name] == l {
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
}

// LockInfo describes one lock in a snapshot.
type LockInfo struct {
	Name    string
	Holder  *Entry  // nil after shutdown began, or while Blocked
	Waiters []Entry // in queue order
	// Blocked: the holder went silent and the lock delay has not passed,
	// or a holder of the server's previous run may still count on it;
	// nobody holds the lock and nobody is granted it yet.
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

// infoLocked describes l for a snapshot or a page. Caller holds t.mu.
func (t *Table) infoLocked(name string, l *lock) LockInfo {
	info := LockInfo{Name: name, Blocked: l.blocked}
	if h := l.holder; h != nil {
		info.Holder = &Entry{Session: h.Session, Token: h.token.Load(), Since: time.Unix(0, h.since)}
	}
	info.Waiters = make([]Entry, 0, int(l.waiters))
	for w := l.head; w != nil; w = w.next {
		info.Waiters = append(info.Waiters, Entry{Session: w.Session, Since: time.Unix(0, w.since)})
	}
	return info
}

// Counts returns the number of live locks, of held locks and of queued
// waiters, for gauges read at scrape time.
func (t *Table) Counts() (locks, holders, waiters int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, l := range t.locks {
		if l.holder != nil {
			holders++
		}
		waiters += int(l.waiters)
	}
	return len(t.locks), holders, waiters
}

// Len returns the number of live locks.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.locks)
}
