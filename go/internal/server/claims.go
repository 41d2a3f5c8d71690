package server

// The server's side of a session's claim: admitting it into the lease
// record (and, in an HA cell, checking that this server is the active one),
// taking it out of the lock table, and telling the waiter that the table
// promoted. Sessions call these; they hold no session state of their own.

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"time"

	"github.com/monolock/monolock/go/internal/locktable"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// dropClaim takes c out of the lock table and tells the promoted waiters,
// if any.
func (s *Server) dropClaim(c *locktable.Claim) {
	start := time.Now()
	promoted, failed := s.table.Release(c)
	s.handOver(promoted, failed, start)
}

// dropClaimHeldBack takes c's session out of the lock table; if c held the
// lock, c keeps its place among the holders for delay (the lock delay),
// so nobody who would not fit beside it is granted the lock before then.
// The hold is counted under cause (one of the server's constants, never
// client text).
func (s *Server) dropClaimHeldBack(c *locktable.Claim, addr netip.Addr, delay time.Duration, cause string) {
	start := time.Now()
	heldBack, promoted, failed := s.table.ReleaseHeldBack(c)
	s.handOver(promoted, failed, start)
	if !heldBack {
		return
	}
	s.holds.HeldBack(cause)
	name := c.Name
	if rec := s.leaseRecord(); rec != nil {
		rec.Hold(name, start.Add(delay)) // also for the next run (leader)
	}
	s.lines.heldBack.Log("lock", name, "delay", delay)
	s.keepHeldBack(c, addr, start, delay)
}

// handOver tells the sessions the table promoted (or could not give a
// token to) after a claim dropped at start.
func (s *Server) handOver(promoted, failed []*locktable.Claim, start time.Time) {
	for _, f := range failed {
		if sess := s.session(f.Session); sess != nil {
			sess.endAndHandOver(protocol.ErrShuttingDown, "cannot issue a fencing token")
		}
	}
	for _, p := range promoted {
		if sess := s.session(p.Session); sess != nil {
			s.log.Debug("promoted", "session", sess.id(), "lock", p.Name, "token", p.Token())
			if sess.promote() {
				s.obs.Promoted(time.Since(start))
			}
		}
	}
}

func (s *Server) session(id uint64) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[id]
}

// limitMismatch is the ERROR 0x1a for a shared claim on name with limit
// mine, when the table refused it (a claim with another limit came first,
// after the admission).
func (s *Server) limitMismatch(name string, mine uint16) error {
	theirs, _ := s.table.Limit(name)
	return limitMismatchError(mine, theirs)
}

// limitMismatchError says both limits.
func limitMismatchError(mine, theirs uint16) *wireError {
	return &wireError{protocol.ErrLimitMismatch, fmt.Sprintf("limit %s differs from the limit %s of the shared sessions on this lock",
		limitText(mine), limitText(theirs))}
}

// limitText says a shared claim's limit, 0 being none.
func limitText(limit uint16) string {
	if limit == 0 {
		return "0 (none)"
	}
	return strconv.Itoa(int(limit))
}

func errText(e *protocol.Error) string { return protocol.ErrCodeName(e.Code) }

// active returns nil when this server may acknowledge sessions now, else
// the ERROR 0x01 that sends the client to the active server of its cell.
// It reads the clock itself, so a server that was paused checks on resume
// before it writes anything.
func (s *Server) active() error {
	if ok, leader := s.activeNow(); !ok {
		return notActive(leader)
	}
	return nil
}

// activeNow reports whether this server may acknowledge sessions now, and
// when not, the active server's address if known.
func (s *Server) activeNow() (ok bool, leader string) {
	if s.gate == nil {
		return true, ""
	}
	return s.gate.Active(time.Now())
}

// admit records the lease (in the data directory, or in the cell's etcd)
// before the session is acknowledged: a server that starts after a crash
// of this one, or a new leader of the cell, holds name back that long. A
// failure ends the session with ERROR 0x01, which the client retries.
func (s *Server) admit(ss *session, name string, lease time.Duration) error {
	rec, where := s.leases, "in the data directory"
	if s.gate != nil {
		if err := s.active(); err != nil {
			return err
		}
		if rec, where = s.gate.Leases(), "in the cell"; rec == nil {
			return &wireError{protocol.ErrShuttingDown, "not the active server"}
		}
	}
	if rec == nil {
		return nil // tokens without a record: tests of the table alone
	}
	if err := rec.Admit(name, s.recordedLease(lease)); err != nil {
		s.lines.leaseRecord.Log("err", err, "lease", lease, "where", where)
		return &wireError{protocol.ErrShuttingDown, "cannot record the lease " + where}
	}
	ss.leases = rec
	return nil
}

// leaseEnded tells the lease record that a session admitted into it has
// ended (its reader is done and the connection is closed). A session that
// ended while the server ran leaves nothing a running server would not
// give away too: its holder closed, its lease ran out, it was kicked or
// broke the protocol (its lock went on at once), or it reset (then
// dropClaimHeldBack keeps the lock's hold). A holder that shutdown told
// (ERROR 0x01) or cut and that neither closed nor outlived its lease may
// not have heard (a partitioned holder cannot): its lock keeps its wait
// in the record until the lease would have run out, also after the clean
// stop.
func (s *Server) leaseEnded(ss *session, err error, until time.Time, peerClosed bool) {
	ms := ss.leaseMS.Load()
	if ss.leases == nil || ms == 0 {
		return
	}
	if ss.claim.Token() != 0 && !peerClosed && !errors.Is(err, io.EOF) && time.Now().Before(until) && s.isShutdown() {
		ss.leases.Hold(ss.claim.Name, until)
	}
	ss.leases.Done(ss.claim.Name, s.recordedLease(time.Duration(ms)*time.Millisecond))
}

// recordedLease is how long the lease record makes a restart after a crash
// hold back a lock that a session with lease holds or waits for: the lease,
// and the lock delay that a silent holder's expiry adds to it. Both are on
// record before the session is acknowledged, so long before the expiry the
// delay extends: a crash at any moment of the delay leaves it to wait out.
// (A Hold written at the expiry would be lazy: a crash within a second of
// it lost the delay.)
func (s *Server) recordedLease(lease time.Duration) time.Duration {
	return lease + s.lockDelay
}
