package claims

import (
	"time"

	"github.com/monolock/monolock/go/internal/leaserecord"
	"github.com/monolock/monolock/go/internal/locktable"
	"github.com/monolock/monolock/go/internal/sessionlimit"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// The causes of a hold, as passed to HoldObserver.HeldBack. A hold is
// logged as "holder gone without a release; lock held back" whatever its
// cause; the metric tells them apart.
const (
	// HeldBackReset: the holder's connection ended with a TCP reset (its
	// lock is kept for the rest of its lease, or the lock delay if longer).
	HeldBackReset = "reset"
	// HeldBackLockDelay: the holder went silent past its lease and
	// --lock-delay keeps its lock that much longer.
	HeldBackLockDelay = "lock_delay"
)

// heldBack is the hold of a claim whose holder ended without a release
// (its connection was reset, or it went silent under a lock delay): it
// keeps its place among the lock's holders until until, as it may still
// be touching the resource. It has no connection any more, but it is
// still a claim: listed, counted against the session limits once its
// connection's place is handed to it (Detach), and kickable (KickHeldBack).
type heldBack struct {
	until time.Time
	timer *time.Timer
	place sessionlimit.Place // the place of its connection, once that is gone
}

// endHoldingBack ends c; if c held the lock, it stays among the holders
// for delay, so nobody who would not fit beside it is granted the lock
// before then. The hold is counted under cause. It reports whether c was
// held back.
func (r *Registry) endHoldingBack(c *Claim, delay time.Duration, cause string) bool {
	start := time.Now()
	r.mu.Lock()
	c.ended = true
	entered := r.claims[c.ID()] == c
	isHeld, promoted, failed := r.table.ReleaseHeldBack(&c.entry)
	if isHeld {
		why := endOfHeld(cause)
		c.hold = &heldBack{until: start.Add(delay)}
		r.heldBack++
		r.emitHeldBack(c, c.hold.until, holdOf(cause))
		// Under r.mu: endHold, which takes it, cannot run before the
		// timer is set.
		c.hold.timer = time.AfterFunc(delay, func() { r.endHold(c, start, why) })
	} else {
		if entered {
			r.emitEnd(c, false, 0) // a waiter leaves
		}
		delete(r.claims, c.ID())
	}
	granted, refused := r.claimsOfLocked(promoted, failed)
	r.mu.Unlock()
	r.handOver(granted, refused, start)
	if !isHeld {
		return false
	}
	r.holds.HeldBack(cause)
	if rec := r.Record(); rec != nil {
		holdOnRecord(rec, &c.entry, start.Add(delay)) // also for the next run (leader)
	}
	r.lines.heldBack.Log("lock", c.entry.Name, "delay", delay)
	return true
}

// endHold ends c's hold: it leaves the table, its lock goes on, and the
// place it took over is free; watchers are told its holding ended for why.
// It reports whether c was held back.
func (r *Registry) endHold(c *Claim, since time.Time, why uint8) bool {
	r.mu.Lock()
	h := c.hold
	if h == nil {
		r.mu.Unlock()
		return false
	}
	r.emitEnd(c, true, why)
	c.hold = nil
	r.heldBack--
	h.timer.Stop()
	h.place.Leave()
	delete(r.claims, c.ID())
	promoted, failed := r.table.Release(&c.entry)
	granted, refused := r.claimsOfLocked(promoted, failed)
	r.mu.Unlock()
	r.handOver(granted, refused, since)
	return true
}

// HeldBackUntil returns when the hold of claim id ends, if it is held back.
func (r *Registry) HeldBackUntil(id uint64) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.claims[id]; c != nil && c.hold != nil {
		return c.hold.until, true
	}
	return time.Time{}, false
}

// KickHeldBack ends the hold of claim id now and hands its lock on, and
// reports whether it was held back. Nobody can tell its holder (its
// connection is gone): it may still be working, and from now on only the
// fencing token protects the resource against it.
func (r *Registry) KickHeldBack(id uint64) bool {
	r.mu.Lock()
	c := r.claims[id]
	r.mu.Unlock()
	if c == nil || !r.endHold(c, time.Now(), protocol.EndKicked) {
		return false
	}
	r.log.Info("held-back holder kicked", "session", id)
	return true
}

// HeldBack returns the number of held-back holders: claims whose
// connections are gone but which still hold their places.
func (r *Registry) HeldBack() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.heldBack
}

// holdOnRecord keeps e's lock held back in rec until until, also for the
// next run: a shared holder's as one of its permits, which a clean stop
// keeps apart from the whole name.
func holdOnRecord(rec *leaserecord.Record, e *locktable.Claim, until time.Time) {
	if e.Shared && e.Limit > 0 {
		rec.HoldPermit(e.Name, until, e.Limit)
		return
	}
	rec.Hold(e.Name, until)
}

// HoldPermit keeps one permit of the shared lock name, with limit, taken
// until until for a holder of the server's previous run, under claim id:
// a claim with no connection, held back, listed and kickable as the
// held-back holders of this run are. Claims that fit beside it are
// granted meanwhile.
func (r *Registry) HoldPermit(id uint64, name string, limit uint16, until time.Time) error {
	c := &Claim{}
	c.Init(id, nobody{})
	c.entry.Name, c.entry.Shared, c.entry.Limit = name, true, limit
	start := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.table.AddHeldBack(&c.entry); err != nil {
		return err
	}
	c.ended = true
	c.hold = &heldBack{until: until}
	r.heldBack++
	r.claims[id] = c
	c.hold.timer = time.AfterFunc(time.Until(until), func() { r.endHold(c, start, protocol.EndReset) })
	return nil
}

// nobody is the sink of a claim whose client is gone: it is never told
// anything (a held-back claim is neither granted nor ended through it).
type nobody struct{}

func (nobody) Granted(uint64) bool              { return false }
func (nobody) End(*protocol.Error, string) bool { return false }
func (nobody) Peer() (remote, identity string)  { return "", "" }

// endOfHeld is how the holding of a claim held back for cause ends, for
// watchers.
func endOfHeld(cause string) uint8 {
	if cause == HeldBackReset {
		return protocol.EndReset
	}
	return protocol.EndExpired
}

// holdOf is the watchers' word for a hold's cause.
func holdOf(cause string) uint8 {
	if cause == HeldBackReset {
		return protocol.HoldReset
	}
	return protocol.HoldLockDelay
}
