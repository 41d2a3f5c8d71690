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
// claims.Registry.HoldName. Claims queue meanwhile and are granted in
// arrival order. After a clean stop the record keeps only the locks whose
// holders may not have heard of it (see claims.Registry.Detach).

// Tokens issues fencing tokens: the data directory's store by default.
type Tokens interface {
	Next() (uint64, error)
	// InHand reports whether Next returns without waiting for a write.
	InHand() bool
	// Failure is the error that keeps tokens from being issued, or nil.
	Failure() error
	Close() error
}

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

// InHand: before until, Next refuses at once.
func (r *restartWait) InHand() bool {
	return time.Now().Before(r.until) || r.Tokens.InHand()
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
