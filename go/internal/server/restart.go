package server

import (
	"errors"
	"time"

	"github.com/monolock/monolock/go/internal/tokenstore"
)

// afterRestart returns tokens that are unavailable before until; the
// server calls Regrant once they are available (see New). A server that
// starts on a used data directory knows nothing of the sessions its
// previous run acknowledged, whose holders may still count on their leases
// by their own clocks (a partitioned holder hears of no crash); waiting out
// the longest lease ever acknowledged means none can. Claims queue
// meanwhile and are granted in arrival order.
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
