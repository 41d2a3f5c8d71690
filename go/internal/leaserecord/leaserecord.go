package leaserecord

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultNamedLease is the threshold above which a lease is recorded with
// its lock's name. Up to it, one recorded bound covers every lock: the
// clients' default lease is 10 s, and a bound that every lock waits out
// after a crash costs no write per claim.
const DefaultNamedLease = 10 * time.Second

// DefaultLazyWrite is how long the record may go on stating a wait that is
// no longer needed (a long-lease session ended, a held-back lock was let
// go) before a write drops it. Only a wait that grows is written before
// the claim that needs it is acknowledged; a wait that shrinks can be
// written late, since a record that states too long a wait is only slow.
const DefaultLazyWrite = time.Second

// Options tune a Record; the zero value is the production
// setting.
type Options struct {
	// NamedLease is the longest lease that the bound for every lock
	// covers; longer ones are recorded by name. 0: DefaultNamedLease.
	NamedLease time.Duration
	// LazyWrite: see DefaultLazyWrite. 0: DefaultLazyWrite.
	LazyWrite time.Duration
	// FreshDir: the data directory is new (tokenstore.Store.Fresh), so
	// that a record file is not there yet. In a used directory a missing
	// record is refused: the locks it holds back would go unguarded.
	FreshDir bool
}

// Record keeps, durably, what a holder of a lock could still count on
// if the server crashed now, so that the next run holds back each lock no
// longer than that. A holder counts on its lock, by its own clock, for up
// to one lease after its last acknowledged message, whether or not the
// server is still there; a crashed server forgets its sessions, its
// holders do not.
//
// The record states, as of the moment it was written, how long the next
// run must hold back every lock ("all") and, by name, the locks that must
// wait longer ("lock"). Each statement is a duration to wait from the next
// run's start: that start is later than the write, so a statement never
// becomes too short, only too long, as time passes.
//
//   - A lease up to NamedLease raises the bound for every lock. It only
//     grows during a run, so almost every claim finds its lease covered
//     and writes nothing (one atomic load).
//   - A longer lease is recorded with its lock's name, unless the record
//     already states at least that much for the name.
//   - Either is durable (fsync) before Admit returns, and the server
//     acknowledges a session (WAITING or ACQUIRED) only after that.
//   - Done (the session no longer counts on its lock) and Hold (keep a
//     lock's wait for the next run until a moment) are written lazily,
//     within LazyWrite, or with the next write that is needed anyway.
//   - What the previous run stated is waited out, from Open, and kept in
//     the record until it has passed: a crash during that wait leaves it
//     for the run after.
//   - Drained writes the record of a clean stop: only the waits kept with
//     Hold and the previous run's that have not passed. The bound for
//     every lock of this run is dropped, since every session of the run
//     has ended.
//
// Where it is kept is its Store: a file in the data directory (OpenFile),
// or etcd for an HA cell, whose leader writes it under its leadership.
type Record struct {
	store     Store
	threshold time.Duration
	lazyWrite time.Duration
	opened    time.Time
	inherited map[string]time.Time // the previous run's waits by name, for Inherited
	// inheritedPermits are the previous run's held-back permits, by name,
	// for InheritedPermits.
	inheritedPermits map[string]Permits
	allUntil0        time.Time // the previous run's wait for every lock, for Inherited

	// ownDurable is own as of the last durable write: a lease up to it
	// needs nothing (the fast path of Admit).
	ownDurable atomic.Int64

	mu       sync.Mutex
	written  *sync.Cond    // signalled when a write ends
	own      time.Duration // the longest lease up to the threshold admitted
	ownSeq   uint64        // the write that carries own
	allUntil time.Time     // the previous run's wait for every lock ends then; zero once over
	allDirty bool
	names    map[string]*leaseName
	dirty    []*leaseName // names whose statement is to be written
	drained  bool         // own is no longer stated
	closed   bool
	rewrite  bool // the next write rewrites the file

	urgent    bool   // an Admit waits for the next write
	lazy      bool   // the next write may carry only lazy changes
	seq       uint64 // the number of the next write
	durable   uint64 // the last write that succeeded
	failedSeq uint64 // the last write that failed
	failure   error  // its error
	writing   bool   // the writer goroutine runs
	writer    sync.WaitGroup
	timer     *time.Timer
	timerAt   time.Time // when timer fires; zero: stopped
}

// leaseName is one lock name that the record states a wait for, or must.
type leaseName struct {
	name     string
	sessions int           // this run's sessions on it with a lease above the threshold
	lease    time.Duration // the longest of their leases
	until    time.Time     // a wait kept until then (Hold, HoldPermit, the previous run's); zero: none
	// whole is until without the permits: a wait for the whole name.
	whole time.Time
	// permits are the ends of shared holders' holds (HoldPermit, the
	// previous run's), all with limit: a clean stop states them alone
	// when nothing else holds the name back.
	permits   []time.Time
	limit     uint16
	stated    time.Duration // what the record says, once write statedSeq is durable
	statedSeq uint64
	// prev is what the record said before write statedSeq: while that
	// write is under way, a lease prev covers needs no wait.
	prev    time.Duration
	prevSeq uint64
	dirty   bool
}

// Open opens the record in the data directory dir: see OpenFile.
func Open(dir string, opts Options) (*Record, error) { return OpenFile(dir, opts) }

// OpenStore reads the record that store keeps, starts waiting out what
// the previous run (or leader) left (see Inherited), and rewrites the
// record with only that. A store that holds nothing has nothing to wait
// out. Only this Record may write store until it is closed.
func OpenStore(store Store, opts Options) (*Record, error) {
	r := &Record{
		store:     store,
		threshold: opts.NamedLease,
		lazyWrite: opts.LazyWrite,
		names:     make(map[string]*leaseName),
		inherited: make(map[string]time.Time),
		seq:       1,

		inheritedPermits: make(map[string]Permits),
	}
	if r.threshold <= 0 {
		r.threshold = DefaultNamedLease
	}
	if r.lazyWrite <= 0 {
		r.lazyWrite = DefaultLazyWrite
	}
	r.written = sync.NewCond(&r.mu)
	all, locks, err := store.Load()
	if err != nil {
		return nil, err
	}

	r.opened = time.Now()
	if all > 0 {
		r.allUntil = r.opened.Add(all)
		r.allUntil0 = r.allUntil
	}
	for name, wait := range locks {
		if wait <= 0 {
			continue
		}
		until := r.opened.Add(wait)
		r.names[name] = &leaseName{name: name, until: until, whole: until}
		r.inherited[name] = until
	}
	if ps, ok := store.(permitStore); ok {
		for name, p := range ps.LoadedPermits() {
			n := r.nameLocked(name)
			n.limit = p.Limit
			for _, until := range p.Until {
				n.permits = append(n.permits, until)
				n.until = later(n.until, until)
			}
			r.inheritedPermits[name] = p
		}
	}
	// The rewrite states the same waits, from now: a crash during the
	// wait leaves them for the next run in full. It also drops what is
	// no longer in force and a torn last line.
	r.seq++
	if err := store.Write(r.snapshotLocked(1, true)); err != nil {
		store.Close()
		return nil, fmt.Errorf("leaserecord: rewrite the lease record: %w", err)
	}
	r.durable = 1
	r.timer = time.AfterFunc(time.Hour, r.tick)
	r.timer.Stop()
	r.mu.Lock()
	r.armExpiryLocked()
	r.mu.Unlock()
	return r, nil
}

// Inherited returns what the previous run left to wait out: until when
// every lock is held back (zero: not at all), and the locks held back
// longer, by name.
func (r *Record) Inherited() (all time.Time, locks map[string]time.Time) {
	locks = make(map[string]time.Time, len(r.inherited))
	for name, until := range r.inherited {
		if until.After(r.allUntil0) {
			locks[name] = until
		}
	}
	return r.allUntil0, locks
}

// InheritedPermits returns the shared locks that the previous run, at its
// clean stop, left held back by permits only: each permit is taken until
// its own moment, and a claim that fits beside them may be granted.
func (r *Record) InheritedPermits() map[string]Permits {
	out := make(map[string]Permits, len(r.inheritedPermits))
	for name, p := range r.inheritedPermits {
		out[name] = Permits{Limit: p.Limit, Until: append([]time.Time(nil), p.Until...)}
	}
	return out
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Failure returns the error of the last write while it has not been
// followed by one that succeeded: nil while the record can be written.
// Claims that need a write are refused meanwhile (Admit fails).
func (r *Record) Failure() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failure
}

// NamedLease is the longest lease that the bound for every lock covers.
func (r *Record) NamedLease() time.Duration { return r.threshold }

var errClosed = errors.New("leaserecord: lease record closed")

// AdmitsAtOnce reports whether Admit of a claim with lease returns without
// waiting for a write: a lease that long is on disk already.
func (r *Record) AdmitsAtOnce(lease time.Duration) bool {
	return lease <= r.threshold && int64(lease) <= r.ownDurable.Load()
}

// Admit records that a session on name with lease may be acknowledged:
// once Admit returned nil, the record makes a server restarted after a
// crash hold name back for at least lease from its start. Every nil
// return must be matched by one Done(name, lease) once the session no
// longer counts on its lock.
func (r *Record) Admit(name string, lease time.Duration) error {
	if lease <= r.threshold {
		if r.AdmitsAtOnce(lease) {
			return nil
		}
		return r.admitAll(lease)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.drained {
		return errClosed
	}
	n := r.nameLocked(name)
	n.sessions++
	n.lease = max(n.lease, lease)
	if lease <= n.prev && n.prevSeq <= r.durable && !r.lostLocked(n.prevSeq) && lease <= n.stated {
		return nil // on disk already; a longer statement is on its way
	}
	target := n.statedSeq
	if n.stated < lease || r.lostLocked(target) {
		r.markLocked(n)
		target = r.urgentLocked()
	}
	if err := r.awaitLocked(target); err != nil {
		r.doneLocked(n)
		return fmt.Errorf("leaserecord: record lease: %w", err)
	}
	return nil
}

func (r *Record) admitAll(lease time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.drained {
		return errClosed
	}
	if lease > r.own || r.lostLocked(r.ownSeq) {
		r.own = max(r.own, min(coarsen(lease), r.threshold))
		r.allDirty = true
		r.ownSeq = r.urgentLocked()
	}
	if err := r.awaitLocked(r.ownSeq); err != nil {
		return fmt.Errorf("leaserecord: record lease: %w", err)
	}
	return nil
}

// Done records, lazily, that a session Admit let through no longer counts
// on its lock: it ended, and its holder knows (it closed, was told, or its
// lease ran out). A wait that must outlast the session is kept with Hold
// first.
func (r *Record) Done(name string, lease time.Duration) {
	if lease <= r.threshold {
		return // the bound for every lock covers it until the run ends
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := r.names[name]; n != nil && n.sessions > 0 {
		r.doneLocked(n)
	}
}

func (r *Record) doneLocked(n *leaseName) {
	n.sessions--
	if n.sessions == 0 {
		n.lease = 0
		r.markLazyLocked(n)
	}
}

// Hold keeps name's wait for the next run until until, also after a clean
// stop: a holder that was not told of its lock's end (a reset, a holder
// that did not close after the shutdown's ERROR) may count on it that
// long. While this run lives, a crash is covered by what Admit recorded,
// so Hold is written lazily.
func (r *Record) Hold(name string, until time.Time) { r.hold(name, until, 0) }

// HoldPermit is Hold for a shared holder with limit: while this run
// lives it holds the whole name back after a crash, as Hold does; the
// record of a clean stop keeps it as one permit taken until until,
// unless something else holds the whole name back (see Permits).
func (r *Record) HoldPermit(name string, until time.Time, limit uint16) { r.hold(name, until, limit) }

// hold is Hold (limit 0) and HoldPermit.
func (r *Record) hold(name string, until time.Time, limit uint16) {
	now := time.Now()
	if !until.After(now) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.drained {
		return
	}
	n := r.nameLocked(name)
	if limit == 0 || (len(n.permits) > 0 && n.limit != limit) {
		// A whole name (the table binds one limit per name, so permits
		// with two limits cannot happen; they would hold it whole).
		n.whole = later(n.whole, until)
	} else {
		n.limit = limit
		n.permits = append(n.permits, until)
	}
	if !until.After(n.until) {
		return
	}
	n.until = until
	if ceilMS(until.Sub(now)) > max(n.stated, r.ownDurableLocked()) {
		r.markLazyLocked(n)
	}
	r.armLocked(until)
}

// Drained writes the record of a clean stop, once every session has
// ended: the waits kept with Hold and the previous run's that have not
// passed, nothing else. The record writes nothing after.
func (r *Record) Drained() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.drained {
		return errClosed
	}
	r.drained = true
	r.ownDurable.Store(-1) // Admit's fast path admits nothing more
	r.allDirty = true
	for _, n := range r.names {
		r.markLocked(n)
	}
	r.rewrite = true
	target := r.urgentLocked()
	err := r.awaitLocked(target)
	r.closeLocked()
	return err
}

// Close stops writing and leaves the record as the last write left it, as
// a crash would.
func (r *Record) Close() {
	r.mu.Lock()
	r.closeLocked()
	r.mu.Unlock()
}

func (r *Record) closeLocked() {
	if r.closed {
		return
	}
	r.closed = true
	if r.timer != nil {
		r.timer.Stop()
	}
	r.written.Broadcast()
	r.mu.Unlock()
	r.writer.Wait()
	r.store.Close()
	r.mu.Lock()
	r.ownDurable.Store(-1) // Admit's fast path admits nothing more
}

func (r *Record) nameLocked(name string) *leaseName {
	n := r.names[name]
	if n == nil {
		n = &leaseName{name: name}
		r.names[name] = n
	}
	return n
}

func (r *Record) ownDurableLocked() time.Duration {
	return time.Duration(r.ownDurable.Load())
}

// lostLocked reports whether write seq failed, so what it carried may not
// be on disk.
func (r *Record) lostLocked(seq uint64) bool {
	return seq > r.durable && seq <= r.failedSeq
}

func (r *Record) markLocked(n *leaseName) {
	if !n.dirty {
		n.dirty = true
		r.dirty = append(r.dirty, n)
	}
}

// markLazyLocked marks n to be written within LazyWrite.
func (r *Record) markLazyLocked(n *leaseName) {
	r.markLocked(n)
	r.armLocked(time.Now().Add(r.lazyWrite))
}

// urgentLocked starts the next write unless one is under way (which then
// does it next), and returns its number.
func (r *Record) urgentLocked() uint64 {
	r.urgent = true
	r.startLocked()
	return r.seq
}

func (r *Record) startLocked() {
	if r.writing || r.closed {
		return
	}
	r.writing = true
	r.writer.Add(1)
	go r.write()
}

// awaitLocked waits until write seq is durable.
func (r *Record) awaitLocked(seq uint64) error {
	for r.durable < seq {
		if r.failedSeq >= seq {
			return r.failure
		}
		if r.closed {
			return errClosed
		}
		r.written.Wait()
	}
	return nil
}

// armLocked makes the timer fire at at, unless it fires earlier.
func (r *Record) armLocked(at time.Time) {
	if r.closed || r.timer == nil {
		return
	}
	if r.timerAt.IsZero() || at.Before(r.timerAt) {
		r.timerAt = at
		r.timer.Reset(time.Until(at))
	}
}

// armExpiryLocked arms the timer for the earliest wait still kept: once it
// has passed, the record drops it.
func (r *Record) armExpiryLocked() {
	var first time.Time
	if !r.allUntil.IsZero() {
		first = r.allUntil
	}
	for _, n := range r.names {
		if !n.until.IsZero() && (first.IsZero() || n.until.Before(first)) {
			first = n.until
		}
	}
	if !first.IsZero() {
		r.armLocked(first)
	}
}

// tick drops the waits that have passed and writes what changed lazily.
func (r *Record) tick() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.timerAt = time.Time{}
	if r.closed {
		return
	}
	now := time.Now()
	if !r.allUntil.IsZero() && !r.allUntil.After(now) {
		r.allUntil = time.Time{}
		r.allDirty = true
	}
	for _, n := range r.names {
		if n.until.IsZero() || n.until.After(now) {
			continue
		}
		n.until = time.Time{}
		switch {
		case n.stated != 0:
			r.markLocked(n)
		case n.sessions == 0 && !n.dirty:
			delete(r.names, n.name) // never written: nothing to drop
		}
	}
	if r.allDirty || len(r.dirty) > 0 || r.failure != nil {
		r.lazy = true
		r.startLocked()
	}
	r.armExpiryLocked()
}

// write is the writer goroutine: it writes while a write is wanted.
func (r *Record) write() {
	defer r.writer.Done()
	r.mu.Lock()
	defer r.mu.Unlock()
	for !r.closed && (r.urgent || r.lazy) {
		seq := r.seq
		r.seq++
		full := r.rewrite || r.failure != nil || r.store.WantsFull()
		change := r.snapshotLocked(seq, full)
		own := r.own
		r.urgent, r.lazy, r.rewrite = false, false, false
		r.mu.Unlock()
		var err error
		if !change.Empty() {
			err = r.store.Write(change)
		}
		r.mu.Lock()
		if err != nil {
			r.failedSeq, r.failure = seq, err
			r.written.Broadcast()
			break // the next Admit tries again; so does the next tick
		}
		r.durable, r.failure = seq, nil
		if !r.drained && !r.closed && int64(own) > r.ownDurable.Load() {
			r.ownDurable.Store(int64(own))
		}
		r.written.Broadcast()
	}
	if r.failure != nil {
		// The next write rewrites the file (the handle is gone): try it
		// again within LazyWrite, not at once, so a broken disk costs one
		// write per interval besides the claims that need one.
		r.armLocked(time.Now().Add(r.lazyWrite))
	}
	r.writing = false
}

// value is what the record must state for n at now.
func (r *Record) value(n *leaseName, now time.Time) time.Duration {
	v := time.Duration(0)
	if n.sessions > 0 {
		v = coarsen(n.lease)
	}
	if n.until.After(now) {
		v = max(v, ceilMS(n.until.Sub(now)))
	}
	return v
}

// snapshotLocked is the change of write seq: every name in force when
// full, else what changed since the last write.
func (r *Record) snapshotLocked(seq uint64, full bool) Change {
	now := time.Now()
	c := Change{Full: full}
	if full || r.allDirty {
		all := time.Duration(0)
		if !r.drained {
			all = r.own
		}
		if r.allUntil.After(now) {
			all = max(all, ceilMS(r.allUntil.Sub(now)))
		}
		c.All, c.AllSet = ceilMS(all), true
		r.allDirty = false
	}
	state := func(n *leaseName) {
		v := r.value(n, now)
		n.dirty = false
		if full || v != n.stated { // else write statedSeq still says it
			if v != 0 || !full { // a full write states only what is in force
				st := Statement{Name: n.name, Wait: ceilMS(v)}
				if r.drained {
					st.Permits, st.Limit = r.permitsOnlyLocked(n, now)
				}
				c.Locks = append(c.Locks, st)
			}
			n.prev, n.prevSeq = n.stated, n.statedSeq
			n.stated, n.statedSeq = v, seq
		}
		if v == 0 && !n.until.After(now) {
			delete(r.names, n.name) // no session, no wait: forgotten
		}
	}
	if full {
		for _, n := range r.names {
			state(n)
		}
	} else {
		for _, n := range r.dirty {
			if n.dirty && r.names[n.name] == n {
				state(n)
			}
		}
	}
	for _, n := range r.dirty {
		n.dirty = false
	}
	r.dirty = r.dirty[:0]
	return c
}

// permitsOnlyLocked returns the waits of n's held-back permits when
// nothing else holds n back (no session's lease, no hold of the whole
// name): a clean stop then states them apart. Caller holds r.mu.
func (r *Record) permitsOnlyLocked(n *leaseName, now time.Time) ([]time.Duration, uint16) {
	if n.sessions > 0 || n.whole.After(now) || n.limit == 0 {
		return nil, 0
	}
	var waits []time.Duration
	for _, until := range n.permits {
		if until.After(now) {
			waits = append(waits, ceilMS(until.Sub(now)))
		}
	}
	return waits, n.limit
}

// coarsen rounds a lease up to the grid that the record states leases
// on: whole milliseconds whose binary form has at most four significant
// bits (8, 9, ... 15 times a power of two). A stated lease is so at most
// 12.5% longer than the lease, and a stream of ever-longer leases, from
// any number of clients, raises it at most 8 times per doubling: at most
// 256 writes in a run for one bound, whatever the rate, where each new
// millisecond would cost a write (an fsync, or an etcd transaction).
func coarsen(lease time.Duration) time.Duration {
	ms := uint64(ceilMS(lease).Milliseconds())
	unit := uint64(1)
	if n := bits.Len64(ms); n > 4 {
		unit <<= n - 4
	}
	return time.Duration((ms+unit-1)/unit*unit) * time.Millisecond
}

// ceilMS rounds d up to a whole millisecond: a wait may only grow.
func ceilMS(d time.Duration) time.Duration {
	return (d + time.Millisecond - 1) / time.Millisecond * time.Millisecond
}
