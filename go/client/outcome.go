package client

import (
	"errors"
	"strings"

	"github.com/monolock/monolock/go/client/internal/retry"
	"github.com/monolock/monolock/go/pkg/protocol"
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
//     error that retrying cannot mend (a terminal code), NotActive for a
//     passive server of an HA cell (ERROR 0x03), else Requeue.
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
	var se *ServerError
	if errors.As(err, &se) && se.Code == protocol.ErrNotActive.Code {
		return retry.NotActive
	}
	return retry.Requeue
}

// leaderIndex is the index in servers (as parseServer gave them) of the
// server a passive server's ERROR 0x03 names in its reason, or -1: the
// reason is parsed as a server address is and compared without regard to
// ASCII case; nothing is resolved, so only an address the client was
// given can be named (spec/vectors/retry.json, leader_names).
func leaderIndex(servers []string, reason string) int {
	named, err := parseServer(reason)
	if err != nil {
		return -1
	}
	for i, s := range servers {
		if strings.EqualFold(s, named) {
			return i
		}
	}
	return -1
}
