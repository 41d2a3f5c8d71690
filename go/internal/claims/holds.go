package claims

import (
	"time"
)

// HoldName keeps name from being granted until until, for holders the
// server does not know: those of its previous run after a crash (why
// protocol.BlockRestart), or of the previous leader of its cell
// (protocol.BlockFailover). New claims queue behind it, the listing shows
// the lock blocked, watchers see the block, and the first waiter is
// granted it then. Each name's longest hold decides: a shorter hold never
// ends a longer one. A lock delay is no block: the silent holder keeps
// its place among the holders (endHoldingBack), so it never ends one
// either.
func (r *Registry) HoldName(name string, until time.Time, why uint8) {
	start := time.Now()
	r.mu.Lock()
	r.table.Block(name) // false: blocked already; the longer hold decides
	prev, armed := r.blockEnds[name]
	if !armed || until.After(prev) {
		r.blockEnds[name] = until
	}
	r.emitBlocked(name, r.blockEnds[name], why)
	r.mu.Unlock()
	if !armed {
		time.AfterFunc(time.Until(until), func() { r.unhold(name, start) })
	}
}

// unhold unblocks name once its longest hold has passed. start is when
// the lock was let go, for the promotion's latency.
func (r *Registry) unhold(name string, start time.Time) {
	r.mu.Lock()
	if wait := time.Until(r.blockEnds[name]); wait > 0 {
		r.mu.Unlock()
		time.AfterFunc(wait, func() { r.unhold(name, start) })
		return
	}
	delete(r.blockEnds, name)
	promoted, failed := r.table.Unblock(name)
	granted, refused := r.claimsOfLocked(promoted, failed)
	r.mu.Unlock()
	r.handOver(granted, refused, start)
}
