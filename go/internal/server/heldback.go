package server

import (
	"net/netip"
	"time"

	"github.com/monolock/monolock/go/internal/locktable"
)

// heldBackHolder is a holder whose session ended without a release (its
// connection was reset, or it went silent under a lock delay) and whose
// claim keeps its place in the lock table until its hold ends: it may
// still be touching the resource. It has no connection any more, but it
// is still a claim: it counts as a session against --max-sessions and
// --max-sessions-per-addr (so a client that resets its connections in a
// loop fills its own limit, not the server's memory), the listing names
// it, and an administrator can end it early (Kick with force).
type heldBackHolder struct {
	claim *locktable.Claim
	addr  netip.Addr // clientKey of its connection, for the per-address limit
	until time.Time  // when the hold ends on its own
	timer *time.Timer
	// placeTaken: its session has been forgotten, and it holds the place
	// in the session limits that the session held (until then the
	// session holds it: one place, never two).
	placeTaken bool
}

// keepHeldBack registers c, whose session ended without a release and which
// the table now holds back, until delay from start; it ends then (or at a
// forced kick).
func (s *Server) keepHeldBack(c *locktable.Claim, addr netip.Addr, start time.Time, delay time.Duration) {
	h := &heldBackHolder{claim: c, addr: addr, until: start.Add(delay)}
	s.mu.Lock()
	s.heldBack[c.Session] = h
	if s.sessions[c.Session] == nil {
		s.takePlaceLocked(h)
	}
	// Under s.mu: endHeldBack, which takes it, cannot run before the
	// timer is set.
	h.timer = time.AfterFunc(delay, func() { s.endHeldBack(c.Session, start) })
	s.mu.Unlock()
}

// takePlaceLocked moves the place of h's forgotten session in the session
// limits to h. Caller holds s.mu.
func (s *Server) takePlaceLocked(h *heldBackHolder) {
	h.placeTaken = true
	s.heldBackPlaces++
	if s.maxPerAddr > 0 {
		s.perAddr[h.addr]++
	}
}

// endHeldBack ends the hold of the held-back holder of session id: it
// leaves the table, its lock goes on, and its place in the session limits
// is free. It reports whether there was such a holder.
func (s *Server) endHeldBack(id uint64, since time.Time) bool {
	s.mu.Lock()
	h := s.heldBack[id]
	if h != nil {
		delete(s.heldBack, id)
		h.timer.Stop()
		if h.placeTaken {
			s.heldBackPlaces--
			s.leavePerAddrLocked(h.addr)
		}
	}
	s.mu.Unlock()
	if h == nil {
		return false
	}
	promoted, failed := s.table.Release(h.claim)
	s.handOver(promoted, failed, since)
	return true
}

// HeldBackUntil returns when the hold of session id's held-back holder
// ends, if session id is one.
func (s *Server) HeldBackUntil(id uint64) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.heldBack[id]; h != nil {
		return h.until, true
	}
	return time.Time{}, false
}

// KickHeldBack ends the hold of session id's held-back holder now and
// hands its lock on, and reports whether there was one. Nobody can tell
// that holder (its connection is gone): it may still be working, and
// from now on only the fencing token protects the resource against it.
func (s *Server) KickHeldBack(id uint64) bool {
	if !s.endHeldBack(id, time.Now()) {
		return false
	}
	s.log.Info("held-back holder kicked", "session", id)
	return true
}

// HeldBack returns the number of held-back holders: sessions that are
// gone but whose claims still hold their places, and count against the
// session limits.
func (s *Server) HeldBack() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.heldBack)
}
