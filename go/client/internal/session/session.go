// Package session is the protocol state of one lock claim over one
// connection, without I/O: the caller feeds it bytes, the passing of time,
// the application letting go and the end of the connection, and it answers
// with what to do (Actions). Every rule that concerns one connection lives
// here once: reply accounting, the heartbeat schedule, the validity
// deadline, and the order "tell the loss, then close". The cases of
// spec/vectors/session.json run against it.
//
// A Core is not safe for concurrent use; its owner serialises the calls.
package session

import (
	"fmt"
	"time"

	"github.com/monolock/monolock/go/client/internal/heartbeat"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// State is where a claim stands.
type State uint8

const (
	Connecting State = iota // ACQUIRE sent, no reply yet
	Waiting                 // queued behind the holder
	Held                    // granted and valid
	Lost                    // the loss is told; the connection stays open until release or lease
	Closed                  // over: close the connection (or it is closed)
)

func (s State) String() string {
	return [...]string{"connecting", "waiting", "held", "lost", "closed"}[s]
}

// CauseKind says why a claim ended.
type CauseKind uint8

const (
	CauseTimeout     CauseKind = iota + 1 // no ack within the client timeout
	CauseIO                               // the connection ended or failed
	CauseServer                           // an ERROR frame
	CauseProtocol                         // the server broke the protocol
	CauseBusy                             // try-acquire got WAITING
	CauseNotMonolock                      // the first byte from the server starts no server message
)

// Cause is why a claim ended: a held lock was lost, or a claim that was
// not held failed.
type Cause struct {
	Kind   CauseKind
	Code   uint8  // CauseServer: the wire code, when Coded
	Coded  bool   // CauseServer: the code byte arrived (an ERROR ends the session at its type byte)
	Reason string // CauseServer: the server's reason; CauseProtocol: what was wrong; CauseNotMonolock: the first bytes it sent, quoted
	Err    error  // CauseIO: the connection's error, if any
}

// Actions is what the owner must do after an input, in this order: tell
// the application (Waiting, Granted, Lost or Failed), write Send, then
// close the connection if Close is set. Telling always comes before the
// close: a close is a release to the server, which may then grant the lock
// to another claim at once.
type Actions struct {
	Waiting bool   // the ACQUIRE was answered WAITING (a wait claim)
	Granted bool   // the lock is granted; Core.Token has the token
	Lost    *Cause // a held lock is lost
	Failed  *Cause // a claim that was not held has ended
	Send    []byte // a frame to write
	Close   bool   // close the connection
}

func (a *Actions) merge(b Actions) {
	a.Waiting = a.Waiting || b.Waiting
	a.Granted = a.Granted || b.Granted
	if b.Lost != nil {
		a.Lost = b.Lost
	}
	if b.Failed != nil {
		a.Failed = b.Failed
	}
	if b.Send != nil {
		a.Send = b.Send
	}
	a.Close = a.Close || b.Close
}

var heartbeatFrame = []byte{protocol.MsgHeartbeat}

// Core is one claim's state machine.
type Core struct {
	acquire  []byte
	try      bool
	lease    time.Duration
	sched    heartbeat.Schedule
	state    State
	inFlight bool      // an ACQUIRE or HEARTBEAT awaits its reply (never more than one)
	lastSend time.Time // send of the newest ACQUIRE or HEARTBEAT
	acked    time.Time // send of the newest acknowledged request (the ACQUIRE's until then)
	token    uint64
	dec      protocol.Decoder
	heard    bool // a byte has come from the server

	// PROCLAIMs (protocol version 3): numbered as they are handed in; the
	// newest not yet sent waits in pending until nothing is in flight,
	// and is then sent instead of a heartbeat (it refreshes the lease and
	// is owed one reply, as a HEARTBEAT is).
	proclaims       uint64 // PROCLAIMs handed in
	pending         []byte // the newest one not sent yet
	pendingSeq      uint64
	inFlightSeq     uint64 // the PROCLAIM in flight; 0: the request in flight is none
	proclaimedUntil uint64 // every PROCLAIM up to this one is acknowledged
}

// New returns the core of a claim that sends the ACQUIRE frame acquire
// (already validated) with the given lease; try makes WAITING end it.
func New(acquire []byte, lease time.Duration, try bool) *Core {
	return &Core{acquire: acquire, lease: lease, try: try, sched: *heartbeat.New(lease)}
}

// State returns where the claim stands.
func (c *Core) State() State { return c.state }

// Token returns the token of the grant (0 before it).
func (c *Core) Token() uint64 { return c.token }

// ValidUntil is the send of the last acknowledged request plus the client
// timeout (0.8 x lease): the lock is valid strictly before it. After a
// loss it stays where it was.
func (c *Core) ValidUntil() time.Time { return c.acked.Add(c.sched.ClientTimeout()) }

// LeaseEnd is the send of the last acknowledged request plus the lease:
// the server keeps the lock at least until then (its lastSeenAt is never
// earlier than that send), and a lost lock's connection is closed then if
// the application holds on.
func (c *Core) LeaseEnd() time.Time { return c.acked.Add(c.lease) }

// Schedule exposes the heartbeat arithmetic (for logs and tests).
func (c *Core) Schedule() *heartbeat.Schedule { return &c.sched }

// NextWakeup is when Tick must run next; zero once closed.
func (c *Core) NextWakeup() time.Time {
	switch c.state {
	case Closed:
		return time.Time{}
	case Lost:
		return c.LeaseEnd()
	}
	deadline := c.ValidUntil()
	if c.inFlight {
		return deadline
	}
	if next := c.nextHeartbeat(); next.Before(deadline) {
		return next
	}
	return deadline
}

func (c *Core) nextHeartbeat() time.Time {
	if c.pending != nil {
		return c.lastSend // a PROCLAIM goes as soon as nothing is in flight
	}
	return c.lastSend.Add(c.sched.Interval())
}

// Proclaim hands in the PROCLAIM frame (already validated) of a claim whose
// ACQUIRE was version 3, and returns its number: Proclaimed reaches it
// once the server has acknowledged it or a later one. It is sent by the
// next Tick when nothing is in flight, else right after the reply owed.
// 0: the claim neither waits nor holds, and nothing is sent.
func (c *Core) Proclaim(frame []byte) uint64 {
	if c.state != Waiting && c.state != Held {
		return 0
	}
	c.proclaims++
	c.pending, c.pendingSeq = frame, c.proclaims // a newer value replaces one not sent yet
	return c.proclaims
}

// Proclaimed is the number of the last PROCLAIM acknowledged (every one
// before it is too).
func (c *Core) Proclaimed() uint64 { return c.proclaimedUntil }

// sendNext is the request that goes when nothing is in flight at now: a
// pending PROCLAIM at once, else a heartbeat when it is due.
func (c *Core) sendNext(now time.Time) []byte {
	switch {
	case c.inFlight:
		return nil
	case c.pending != nil:
		frame := c.pending
		c.inFlightSeq, c.pending = c.pendingSeq, nil
		return c.send(frame, now)
	case !now.Before(c.nextHeartbeat()):
		return c.send(heartbeatFrame, now)
	}
	return nil
}

// Start is the open connection: send the ACQUIRE. The client timeout runs
// from its send until the first reply.
func (c *Core) Start(now time.Time) Actions {
	c.state = Connecting
	c.acked = now
	return Actions{Send: c.send(c.acquire, now)}
}

// Receive takes bytes from the server.
func (c *Core) Receive(data []byte, now time.Time) Actions {
	switch c.state {
	case Closed:
		return Actions{}
	case Lost:
		return c.receiveWhileLost(data)
	}
	// The deadline first: once it has passed, nothing still in the receive
	// buffer (a late ack, a promotion) can save the claim.
	if a, over := c.Poll(now); over {
		return a
	}
	var acts Actions
	for len(data) > 0 {
		var f protocol.Frame
		var ok bool
		var err error
		first := data
		f, data, ok, err = c.dec.Next(data)
		if err != nil {
			cause := Cause{Kind: CauseProtocol, Reason: err.Error()}
			if !c.heard {
				// Not a monolock server at all (an HTTP port, TLS spoken to
				// in plaintext): say what it sent.
				cause = Cause{Kind: CauseNotMonolock, Reason: Quote(first, 12)}
			}
			acts.merge(c.end(cause))
			return acts
		}
		c.heard = true
		if !ok {
			break
		}
		acts.merge(c.onFrame(f, now))
		if c.state != Held && c.state != Waiting && c.state != Connecting {
			return acts
		}
	}
	acts.merge(c.Tick(now))
	return acts
}

// receiveWhileLost reads and ignores replies: a late ack revives nothing.
// Only the server ending the session (ERROR) or garbage ends the wait.
func (c *Core) receiveWhileLost(data []byte) Actions {
	for len(data) > 0 {
		f, rest, ok, err := c.dec.Next(data)
		if err != nil || (ok && f.Type == protocol.MsgError) {
			c.state = Closed
			return Actions{Close: true}
		}
		if !ok {
			break
		}
		data = rest
	}
	return Actions{}
}

// Tick lets time pass: the deadline, a due heartbeat, the close of a lost
// lock at lease.
func (c *Core) Tick(now time.Time) Actions {
	switch c.state {
	case Closed:
		return Actions{}
	case Lost:
		if !now.Before(c.LeaseEnd()) {
			c.state = Closed
			return Actions{Close: true}
		}
		return Actions{}
	}
	if a, over := c.Poll(now); over {
		return a
	}
	return Actions{Send: c.sendNext(now)}
}

// Poll checks the deadline only, as a polled validity check does: past it,
// a held lock is lost (told, connection kept) and any other claim fails
// (closed). over reports that the claim is no longer live.
func (c *Core) Poll(now time.Time) (a Actions, over bool) {
	switch c.state {
	case Closed, Lost:
		return Actions{}, true
	}
	if now.Before(c.ValidUntil()) {
		return Actions{}, false
	}
	return c.end(Cause{Kind: CauseTimeout}), true
}

// Release is the application letting go (release, cancel, give up):
// close at once. After a loss that is safe: the application has stopped.
func (c *Core) Release() Actions {
	if c.state == Closed {
		return Actions{}
	}
	c.state = Closed
	return Actions{Close: true}
}

// ConnectionEnded is the server ending the connection (EOF, reset, I/O
// error): the server has let go, so the loss is told at once.
func (c *Core) ConnectionEnded(err error) Actions {
	switch c.state {
	case Closed:
		return Actions{}
	case Lost:
		c.state = Closed
		return Actions{Close: true}
	}
	return c.end(Cause{Kind: CauseIO, Err: err})
}

// end finishes a live claim with cause: a held lock is lost (by timeout:
// told, and the connection is kept until release or lease; otherwise the
// server has already let go, so close too); any other claim fails.
func (c *Core) end(cause Cause) Actions {
	if c.state == Held {
		if cause.Kind == CauseTimeout {
			c.state = Lost
			return Actions{Lost: &cause}
		}
		c.state = Closed
		return Actions{Lost: &cause, Close: true}
	}
	c.state = Closed
	return Actions{Failed: &cause, Close: true}
}

func (c *Core) send(frame []byte, now time.Time) []byte {
	c.lastSend, c.inFlight = now, true
	return frame
}

// ack takes the reply to the request in flight: an RTT sample, and the
// validity now runs from that request's send.
func (c *Core) ack(now time.Time) *Cause {
	if !c.inFlight {
		return &Cause{Kind: CauseProtocol, Reason: "a reply with no request in flight"}
	}
	c.inFlight = false
	c.sched.Observe(now.Sub(c.lastSend))
	c.acked = c.lastSend
	if c.inFlightSeq != 0 {
		c.proclaimedUntil, c.inFlightSeq = c.inFlightSeq, 0
	}
	return nil
}

// onFrame applies one frame. Reply accounting: every request gets exactly
// one reply, and a promotion is one extra ACQUIRED that is never an ack.
func (c *Core) onFrame(f protocol.Frame, now time.Time) Actions {
	if f.Type == protocol.MsgError {
		return c.end(Cause{Kind: CauseServer, Code: f.Code, Coded: f.Coded, Reason: f.Reason})
	}
	switch c.state {
	case Connecting:
		if err := c.ack(now); err != nil {
			return c.end(*err)
		}
		if f.Type == protocol.MsgWaiting {
			if c.try {
				return c.end(Cause{Kind: CauseBusy})
			}
			c.state = Waiting
			return Actions{Waiting: true}
		}
		return c.grant(f.Token)
	case Waiting:
		if f.Type == protocol.MsgWaiting {
			if err := c.ack(now); err != nil {
				return c.end(*err)
			}
			return c.proclaimAfterAck(now)
		}
		// The promotion; a pending heartbeat's ack still follows.
		return c.grant(f.Token)
	}
	// Held: only heartbeat acks, each with our token.
	if f.Type == protocol.MsgWaiting {
		return c.end(Cause{Kind: CauseProtocol, Reason: "WAITING for a held lock"})
	}
	if f.Token != c.token {
		return c.end(Cause{Kind: CauseProtocol, Reason: "the token changed"})
	}
	if err := c.ack(now); err != nil {
		return c.end(*err)
	}
	return c.proclaimAfterAck(now)
}

// proclaimAfterAck sends a PROCLAIM that waited for the reply just taken.
func (c *Core) proclaimAfterAck(now time.Time) Actions {
	if c.pending == nil {
		return Actions{}
	}
	return Actions{Send: c.sendNext(now)}
}

func (c *Core) grant(token uint64) Actions {
	c.state, c.token = Held, token
	return Actions{Granted: true}
}

// Quote renders up to n bytes for a message: printable ASCII as it is,
// anything else as \xNN, and an ellipsis when b was longer.
func Quote(b []byte, n int) string {
	var out []byte
	for i, x := range b {
		if i == n {
			return string(out) + "…"
		}
		if x >= 0x20 && x < 0x7f && x != '\\' && x != '"' {
			out = append(out, x)
		} else {
			out = fmt.Appendf(out, "\\x%02x", x)
		}
	}
	return string(out)
}
