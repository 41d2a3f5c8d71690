// Package retry is the acquisition's retry policy as a pure plan: which
// server to connect to next and when to sleep, told each attempt's outcome.
// spec/constants.json ("retry") states the policy and
// spec/vectors/retry.json runs it; every client follows the same one.
package retry

import (
	"time"

	"github.com/monolock/monolock/go/client/internal/backoff"
	"github.com/monolock/monolock/go/internal/spec"
)

// ResetAfterQueued is how long an attempt must have been queued (after
// WAITING) to show a healthy server, which starts the backoff again.
const ResetAfterQueued = spec.RetryResetAfterQueuedMS * time.Millisecond

// Outcome is how an attempt ended.
type Outcome uint8

const (
	Granted       Outcome = iota // the lock was granted
	ConnectFailed                // no connection (TCP, TLS handshake, connect timeout)
	Requeue                      // the server answered, then the claim failed in a retryable way
	Terminal                     // a terminal error: it goes to the caller
	Busy                         // try-acquire found the lock held
	NotMonolock                  // the server does not speak the protocol: drop it
	NotActive                    // a passive server of an HA cell (ERROR 0x03): see ReportNotActive
)

// Kind is what to do next.
type Kind uint8

const (
	Connect Kind = iota // connect to Step.Server
	Sleep               // wait Step.Delay
	GiveUp              // the last attempt's error goes to the caller
)

// Step is the plan's next action.
type Step struct {
	Kind   Kind
	Server int           // Connect: index into the server list
	Delay  time.Duration // Sleep
}

// Plan walks the server list with one cursor: every attempt goes to the
// server under it, and any failed attempt moves it on (wrapping around), so
// a server that refuses (shutting down, not the active one) is not asked
// again first. Connect failures go on at once until a whole pass has
// failed; a server that answered and then failed is always followed by a
// backoff sleep. A server that does not speak monolock leaves the walk for
// good. Try-acquire makes one pass and never sleeps: a temporary error
// moves it to the next server too (a passive server of an HA cell).
type Plan struct {
	servers   int
	try       bool
	dropped   []bool // servers that do not speak monolock, left out of the walk
	live      int    // servers not dropped
	cursor    int
	unreached int  // connect failures since the last sleep or answer
	sleepDue  bool // a sleep comes before the next connect
	pauseDue  bool // the short pause after a passive answer comes first
	over      bool
	bo        backoff.Backoff
}

// New returns the plan of an acquisition over servers addresses.
func New(servers int, try bool) *Plan {
	return &Plan{servers: servers, try: try, dropped: make([]bool, servers), live: servers}
}

// Next returns the next action.
func (p *Plan) Next() Step {
	switch {
	case p.over:
		return Step{Kind: GiveUp}
	case p.pauseDue:
		// delay_0, which is no step of the backoff: it starts over after.
		p.pauseDue = false
		d := p.bo.Next()
		p.bo.Reset()
		return Step{Kind: Sleep, Delay: d}
	case p.sleepDue:
		p.sleepDue = false
		return Step{Kind: Sleep, Delay: p.bo.Next()}
	}
	return Step{Kind: Connect, Server: p.cursor}
}

// Report tells the plan how the attempt it asked for ended; queued is how
// long that attempt had been queued after WAITING (zero if never).
func (p *Plan) Report(o Outcome, queued time.Duration) {
	switch o {
	case NotActive:
		p.ReportNotActive(-1)
	case Granted, Terminal, Busy:
		p.over = true
	case NotMonolock:
		p.dropped[p.cursor] = true
		p.live--
		if p.live == 0 {
			p.over = true
			return
		}
		p.advance()
		if p.unreached >= p.live { // every server left has failed to connect
			p.unreached = 0
			p.over = p.try
			p.sleepDue = !p.try
		}
	case ConnectFailed:
		p.advance()
		p.unreached++
		if p.unreached >= p.live {
			p.unreached = 0
			p.over = p.try
			p.sleepDue = !p.try
		}
	case Requeue:
		if p.try { // one pass: on to the next server, if any is left
			p.advance()
			p.unreached++
			p.over = p.unreached >= p.live
			return
		}
		p.advance()
		p.unreached = 0
		if queued >= ResetAfterQueued {
			p.bo.Reset()
		}
		p.sleepDue = true
	}
}

// ReportNotActive tells the plan that a passive server of an HA cell
// refused the attempt (ERROR 0x03), naming leader, the index in the list
// of the active server (-1: none of the list). A cell that answers is
// alive and its election ends within its TTL, so the backoff starts over
// and the pause is the first delay only; the next attempt goes to leader
// if it is still in the walk, else on as after any failure. Try-acquire
// takes it as a requeue: its one pass goes on in list order.
func (p *Plan) ReportNotActive(leader int) {
	if p.try {
		p.Report(Requeue, 0)
		return
	}
	p.unreached = 0
	p.bo.Reset()
	if leader >= 0 && leader < p.servers && !p.dropped[leader] {
		p.cursor = leader
	} else {
		p.advance()
	}
	p.pauseDue = true
}

// advance moves the cursor to the next server still in the walk.
func (p *Plan) advance() {
	for {
		p.cursor = (p.cursor + 1) % p.servers
		if !p.dropped[p.cursor] {
			return
		}
	}
}
