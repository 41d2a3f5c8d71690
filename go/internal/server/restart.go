package server

import (
	"errors"
	"log/slog"
	"time"

	"github.com/monolock/monolock/go/internal/tokenstore"
)

// A server that starts on a used data directory knows nothing of the
// sessions its previous run acknowledged, whose holders may still count on
// their leases by their own clocks (a partitioned holder hears of no
// crash). The lease record (leaserecord.Record) says how long: one
// wait for every lock, which covers the leases up to its threshold, and
// longer waits by lock name. The first is afterRestart, the second
// holdBack. Claims queue meanwhile and are granted in arrival order. After
// a clean stop the record keeps only the locks whose holders may not have
// heard of it (see leaseEnded).

// afterRestart returns tokens that are unavailable before until; the
// server calls Regrant once they are available (see New).
func afterRestart(tokens Tokens, until time.Time) Tokens {
	if !time.Now().Before(until) {
		return tokens
	}
	return &restartWait{Tokens: tokens, until: until}
}

type restartWait struct {
	Tokens
	until time.Time
}

var errRestartWait = errors.New("waiting out the leases of the previous run")

func (r *restartWait) Next() (uint64, error) {
	if time.Now().Before(r.until) {
		return 0, &tokenstore.UnavailableError{Cause: errRestartWait}
	}
	return r.Tokens.Next()
}

// holdBack keeps name from being granted until until, as the lock delay
// does after a silent holder: new claims queue behind it, the listing
// shows the lock blocked, and the first waiter is granted it then.
func (s *Server) holdBack(name string, until time.Time) {
	s.table.Block(name) // false: blocked already; the longer hold decides
	s.holdUntil(name, until, time.Now())
}

// HoldBack is holdBack for a new leader of an HA cell, for a lock that a
// holder under the previous leader may still count on.
func (s *Server) HoldBack(name string, until time.Time) { s.holdBack(name, until) }

// holdUntil ends the block on name (Block) at until, or later if another
// hold of it lasts longer: every block ends here, so a shorter hold never
// ends a longer one. A lock delay is no block: the silent holder keeps
// its place among the holders (dropClaimHeldBack), so it never ends one
// either.
// start is when the lock was let go, for the promotion's latency.
func (s *Server) holdUntil(name string, until, start time.Time) {
	s.holdsMu.Lock()
	prev, armed := s.holdEnds[name]
	if !armed || until.After(prev) {
		s.holdEnds[name] = until
	}
	s.holdsMu.Unlock()
	if !armed {
		time.AfterFunc(time.Until(until), func() { s.unhold(name, start) })
	}
}

// unhold unblocks name once its longest hold has passed.
func (s *Server) unhold(name string, start time.Time) {
	s.holdsMu.Lock()
	if wait := time.Until(s.holdEnds[name]); wait > 0 {
		s.holdsMu.Unlock()
		time.AfterFunc(wait, func() { s.unhold(name, start) })
		return
	}
	delete(s.holdEnds, name)
	// Under holdsMu, so that a hold that comes next blocks the lock anew
	// rather than finding it still blocked and ending unenforced.
	promoted, failed := s.table.Unblock(name)
	s.holdsMu.Unlock()
	s.handOver(promoted, failed, start)
}

// logRestartWait says, at start, what the previous run left to wait out.
func logRestartWait(log *slog.Logger, all time.Time, locks map[string]time.Time) {
	wait := max(time.Until(all), 0)
	var longest time.Duration
	for name, until := range locks {
		longest = max(longest, time.Until(until))
		log.Debug("started: lock held back for a holder of the previous run", "lock", name, "wait", time.Until(until))
	}
	if wait == 0 && len(locks) == 0 {
		return
	}
	log.Warn("started: new grants wait out the leases of the previous run, as its holders may still count on them",
		"wait", wait.Round(time.Millisecond), "locks_held_longer", len(locks), "longest", longest.Round(time.Millisecond))
}
