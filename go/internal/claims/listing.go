package claims

import (
	"time"

	"github.com/monolock/monolock/go/internal/listing"
	"github.com/monolock/monolock/go/internal/locktable"
)

// LockListing returns every live lock, sorted by name, as the admin API
// lists it (at most locktable.MaxListed sessions of each kind per lock).
// Claims that end while it is built may be listed without remote address
// and identity.
func (r *Registry) LockListing() []listing.Lock {
	return r.listLocks(r.table.Snapshot())
}

// LockPage is one page of the listing: up to limit locks whose names sort
// after after ("" for the first page), in name order, and whether more
// follow. Only the page is built, never the whole table. Pages are read
// one at a time, not as one snapshot: a lock taken or freed meanwhile may
// be missing or extra, but no name is listed twice or out of order.
func (r *Registry) LockPage(after string, limit int) (page []listing.Lock, more bool) {
	locks, more := r.table.Page(after, limit)
	return r.listLocks(locks), more
}

// Locks returns a snapshot of every live lock with its holders and waiters.
func (r *Registry) Locks() []locktable.LockInfo { return r.table.Snapshot() }

// Counts returns the number of live locks, held locks and queued waiters.
func (r *Registry) Counts() (locks, holders, waiters int) { return r.table.Counts() }

// listLocks describes the table's locks with what the layer knows of
// their claims: address, identity, lease, and a held-back holder's end.
func (r *Registry) listLocks(locks []locktable.LockInfo) []listing.Lock {
	out := make([]listing.Lock, 0, len(locks))
	for _, l := range locks {
		known := r.lookUp(l.Holders, l.Waiters, l.HeldBackHolders)
		lk := listing.Lock{Name: l.Name, HeldBack: l.HeldBack, Blocked: l.Blocked,
			HoldersTotal: l.HoldersTotal, WaitersTotal: l.WaitersTotal, Watchers: r.watches.Watchers(l.Name),
			Holders: make([]listing.Session, 0, len(l.Holders)), Waiters: make([]listing.Session, 0, len(l.Waiters))}
		limitBound := false
		for _, h := range l.Holders {
			lk.Holders = append(lk.Holders, describe(h, known[h.Session]))
			limitBound = limitBound || h.Shared
		}
		if len(lk.Holders) > 0 {
			lk.Holder = &lk.Holders[0]
		}
		for _, w := range l.Waiters {
			lk.Waiters = append(lk.Waiters, describe(w, known[w.Session]))
			limitBound = limitBound || w.Shared
		}
		for _, h := range l.HeldBackHolders {
			lk.HeldBackHolders = append(lk.HeldBackHolders, describeHeldBack(h, known[h.Session]))
			limitBound = limitBound || h.Shared
		}
		switch {
		case l.Shared:
			lk.Mode = listing.ModeShared
		case len(l.Holders) > 0:
			lk.Mode = listing.ModeExclusive
		}
		if limitBound {
			limit := l.Limit
			lk.Limit = &limit
		}
		out = append(out, lk)
	}
	return out
}

// SessionPage lists up to limit sessions of one kind of lock name (a
// listing.Kind...) after the key after (0: from the first), and reports
// whether the name has any holder or waiter.
func (r *Registry) SessionPage(name, kind string, after uint64, limit int) (page listing.SessionPage, found bool) {
	tableKind := map[string]locktable.SessionKind{listing.KindHolders: locktable.LiveHolders,
		listing.KindHeldBackHolders: locktable.HeldBackHolders, listing.KindWaiters: locktable.Waiters}[kind]
	entries, more, found := r.table.SessionPage(name, tableKind, after, limit)
	known := r.lookUp(entries)
	page = listing.SessionPage{Lock: name, Kind: kind, Sessions: make([]listing.Session, 0, len(entries))}
	for _, e := range entries {
		var s listing.Session
		switch kind {
		case listing.KindHeldBackHolders:
			s = describeHeldBack(e, known[e.Session])
		case listing.KindWaiters:
			s = describe(e, known[e.Session])
			s.Arrival = e.Arrival
		default:
			s = describe(e, known[e.Session])
		}
		page.Sessions = append(page.Sessions, s)
	}
	if more && len(entries) > 0 {
		last := entries[len(entries)-1]
		page.Next = last.Token
		if kind == listing.KindWaiters {
			page.Next = last.Arrival
		}
	}
	return page, found
}

// known is what the layer knows of the claims of one listing step, read
// under one hold of r.mu: a page of 100 held-back holders takes the lock
// once, not 100 times, so listings cost grants on other names little.
type known map[uint64]knownClaim

type knownClaim struct {
	claim *Claim
	until time.Time // the end of its hold, when held back
}

// lookUp finds the claims of entries.
func (r *Registry) lookUp(lists ...[]locktable.Entry) known {
	n := 0
	for _, l := range lists {
		n += len(l)
	}
	out := make(known, n)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range lists {
		for _, e := range l {
			if c := r.claims[e.Session]; c != nil {
				k := knownClaim{claim: c}
				if c.hold != nil {
					k.until = c.hold.until
				}
				out[e.Session] = k
			}
		}
	}
	return out
}

// describe describes a live claim of the table for the listing; one that
// ended meanwhile (k is zero) without remote address and identity.
func describe(e locktable.Entry, k knownClaim) listing.Session {
	out := listing.Session{ID: e.Session, Token: e.Token, Since: e.Since.UTC(), Mode: modeOf(e.Shared)}
	if c := k.claim; c != nil {
		out.Remote, out.Identity = c.sink.Peer()
		out.LeaseMS = int64(c.LeaseMS())
		out.SetValue(c.Value())
	}
	return out
}

// describeHeldBack describes a held-back holder, with the end of its hold.
func describeHeldBack(e locktable.Entry, k knownClaim) listing.Session {
	out := listing.Session{ID: e.Session, Token: e.Token, Since: e.Since.UTC(), Mode: modeOf(e.Shared)}
	if !k.until.IsZero() {
		until := k.until.UTC()
		out.HeldBackUntil = &until
	}
	return out
}

func modeOf(shared bool) string {
	if shared {
		return listing.ModeShared
	}
	return listing.ModeExclusive
}
