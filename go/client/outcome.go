package client

import (
	"errors"

	"github.com/monolock/monolock/go/client/internal/retry"
)

// attemptOutcome sorts how an attempt ended into the retry plan's outcome:
// a pure function of the attempt's error and whether a server answered
// it, so that the acquisition loop only moves bytes and the decision has
// a table of its own (outcome_test.go), as the session core's do.
//
//   - No server answered (reached false), or one that does not speak the
//     protocol: NotMonolock when it would answer the same way next time
//     (not monolock, or a certificate problem), else ConnectFailed.
//   - A server answered: Busy for a try-acquire's WAITING, Terminal for an
//     error that retrying cannot mend (a terminal code), else Requeue.
func attemptOutcome(err error, reached bool) retry.Outcome {
	if err == nil {
		return retry.Granted
	}
	var (
		notMonolock *notMonolockError
		connErr     *connectError
	)
	if !reached || errors.As(err, &notMonolock) {
		if notMonolock != nil || (errors.As(err, &connErr) && connErr.cert != noCertProblem) {
			return retry.NotMonolock
		}
		return retry.ConnectFailed
	}
	switch {
	case errors.Is(err, ErrBusy):
		return retry.Busy
	case !retryable(err):
		return retry.Terminal
	}
	return retry.Requeue
}
