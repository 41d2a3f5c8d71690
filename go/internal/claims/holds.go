package claims

import (
	"sync"
	"time"
)

// nameHolds are the blocks on lock names that a server puts for holders
// it does not know: those of its previous run after a crash, or of the
// previous leader of its cell. Each name's longest hold decides.
type nameHolds struct {
	mu   sync.Mutex
	ends map[string]time.Time
}

// HoldName keeps name from being granted until until, as the lock delay
// does after a silent holder: new claims queue behind it, the listing
// shows the lock blocked, and the first waiter is granted it then.
func (r *Registry) HoldName(name string, until time.Time) {
	r.table.Block(name) // false: blocked already; the longer hold decides
	r.holdUntil(name, until, time.Now())
}

// holdUntil ends the block on name (Block) at until, or later if another
// hold of it lasts longer: every block ends here, so a shorter hold never
// ends a longer one. A lock delay is no block: the silent holder keeps
// its place among the holders (endHoldingBack), so it never ends one
// either. start is when the lock was let go, for the promotion's latency.
func (r *Registry) holdUntil(name string, until, start time.Time) {
	h := &r.names
	h.mu.Lock()
	prev, armed := h.ends[name]
	if !armed || until.After(prev) {
		h.ends[name] = until
	}
	h.mu.Unlock()
	if !armed {
		time.AfterFunc(time.Until(until), func() { r.unhold(name, start) })
	}
}

// unhold unblocks name once its longest hold has passed.
func (r *Registry) unhold(name string, start time.Time) {
	h := &r.names
	h.mu.Lock()
	if wait := time.Until(h.ends[name]); wait > 0 {
		h.mu.Unlock()
		time.AfterFunc(wait, func() { r.unhold(name, start) })
		return
	}
	delete(h.ends, name)
	// Under h.mu, so that a hold that comes next blocks the lock anew
	// rather than finding it still blocked and ending unenforced.
	r.mu.Lock()
	promoted, failed := r.table.Unblock(name)
	granted, refused := r.claimsOfLocked(promoted, failed)
	r.mu.Unlock()
	h.mu.Unlock()
	r.handOver(granted, refused, start)
}
