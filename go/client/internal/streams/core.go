// Package streams is the protocol state of a version 4 session without
// I/O: one connection, one lease, many claim and watch streams. The caller feeds it
// the frames the server sent, the passing of time, what the application
// asks (open, proclaim, release, close) and the end of the connection;
// it answers with what to tell whom and what to send (Actions). The
// rules of docs/protocol.md "Version 4: sessions" live here once: one
// request (SESSION or HEARTBEAT) in flight, the heartbeat schedule, one
// validity deadline for every claim, stream ids that only grow, the reply
// accounting of each stream, and "tell the loss, then close".
//
// A Core is not safe for concurrent use; its owner serialises the calls.
package streams

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/monolock/monolock/go/client/internal/heartbeat"
	"github.com/monolock/monolock/go/client/internal/session"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// Cause is why a claim or the session ended; the single-claim core's
// kinds and fields mean the same here.
type Cause = session.Cause

// State is where the session stands.
type State uint8

const (
	Connecting State = iota // SESSION sent, no SESSION_OK yet
	Live                    // SESSION_OK came; claims may be opened
	TimedOut                // the deadline passed: told; the connection stays open until the lease ends
	Closed                  // over: close the connection (or it is closed)
)

func (s State) String() string { return [...]string{"connecting", "live", "timed out", "closed"}[s] }

// EventKind is what happened to a stream.
type EventKind uint8

const (
	Waiting      EventKind = iota + 1 // the OPEN was answered WAITING
	Granted                           // the claim holds; Event.Token has the token
	Proclaimed                        // the reply to an ON came; Event.Seq names the last ON acknowledged
	Failed                            // a claim that never held has ended (Event.Cause)
	Lost                              // a held claim is lost (Event.Cause)
	Released                          // the claim's RELEASE is answered, or the session ended after it
	WatchEvent                        // an EVENT of a watch stream (Event.WatchEvent)
	WatchStarted                      // a watch's one WATCHING: its picture is whole at (Epoch, Seq) as of its OPEN's send (At)
	WatchAlive                        // an ALIVE vouches for a started watch as of the HEARTBEAT's send (At)
)

func (k EventKind) String() string {
	return [...]string{"?", "waiting", "granted", "proclaimed", "failed", "lost", "released", "watch event", "watch started", "watch alive"}[k]
}

// Event is one thing to tell the owner of a stream.
type Event struct {
	Stream uint32
	Kind   EventKind
	Token  uint64
	Seq    uint64 // Proclaimed: the ON's number; WatchStarted: the WATCHING's seq
	Cause  *Cause

	WatchEvent protocol.Event
	Epoch      uint64    // WatchStarted
	At         time.Time // WatchStarted, WatchAlive: the send that vouches
}

// Actions is what the owner must do after an input, in this order: tell
// (Ready, Events, Ended), write Send, then close the connection if Close
// is set. Telling comes before the close: a close lets the server hand
// the session's claims on.
type Actions struct {
	Ready  bool // SESSION_OK came: MaxStreams is known
	Events []Event
	Ended  *Cause // the session is over (every stream's end is in Events)
	Send   []byte
	Close  bool
}

// claim is the client's view of one claim stream.
type claim struct {
	watch    bool      // a watch stream, not a claim
	started  bool      // a watch's WATCHING came
	openSent time.Time // a watch's OPEN
	phase    phase
	try      bool
	token    uint64
	ons      []uint64 // the ONs in flight, by number, oldest first
	abandon  *Cause   // releasing because the claim failed (a try's WAITING): told when RELEASED comes
}

type phase uint8

const (
	opening   phase = iota // OPEN sent, no reply yet
	waiting                // queued
	held                   // granted
	releasing              // RELEASE sent: frames of the stream are dropped until RELEASED
	watching               // a watch stream
)

var heartbeatFrame = []byte{protocol.MsgHeartbeat}

// ErrNotLive is an open, proclaim or release refused because the session
// is not (or no longer) live.
var ErrNotLive = errors.New("the session has ended")

// ErrIDsExhausted is an OPEN that would pass the largest stream id: open a
// new session.
var ErrIDsExhausted = errors.New("the session has used every stream id; open a new session")

// Core is one session's state machine.
type Core struct {
	lease      time.Duration
	sched      heartbeat.Schedule
	state      State
	inFlight   bool      // SESSION or HEARTBEAT awaits its reply
	lastSend   time.Time // send of the newest SESSION or HEARTBEAT
	acked      time.Time // send of the newest answered one
	maxStreams uint32
	lastID     uint32 // the highest id opened (ids start at 1)
	claims     map[uint32]*claim
	ons        uint64 // ONs handed in, for their numbers
	ended      *Cause
}

// New returns the core of a session with lease (already validated).
func New(lease time.Duration) *Core {
	return &Core{lease: lease, sched: *heartbeat.New(lease), claims: map[uint32]*claim{}}
}

// State returns where the session stands.
func (c *Core) State() State { return c.state }

// Cause is why the session ended (nil while it has not).
func (c *Core) Cause() *Cause { return c.ended }

// MaxStreams is SESSION_OK's cap of open streams (0 before it).
func (c *Core) MaxStreams() uint32 { return c.maxStreams }

// Open is how many streams are open: opened and neither ended by the
// server nor answered RELEASED.
func (c *Core) Open() int { return len(c.claims) }

// IDsLeft is how many more streams the session can open: ids only grow,
// so a session that has used them all must make way for a new one.
func (c *Core) IDsLeft() uint32 { return math.MaxUint32 - c.lastID }

// SkipIDs uses n ids without opening streams (tests reach the end of the
// ids so).
func (c *Core) SkipIDs(n uint32) { c.lastID += min(n, c.IDsLeft()) }

// ValidUntil is the send of the last answered SESSION or HEARTBEAT plus
// the client timeout (0.8 x lease): every claim of the session is valid
// strictly before it.
func (c *Core) ValidUntil() time.Time { return c.acked.Add(c.sched.ClientTimeout()) }

// LeaseEnd is that send plus the whole lease: the server keeps the claims
// at least until then.
func (c *Core) LeaseEnd() time.Time { return c.acked.Add(c.lease) }

// Schedule exposes the heartbeat arithmetic.
func (c *Core) Schedule() *heartbeat.Schedule { return &c.sched }

// Start is the open connection: send SESSION (built by the owner, which
// validated the lease). The client timeout runs from its send.
func (c *Core) Start(frame []byte, now time.Time) Actions {
	c.state, c.acked = Connecting, now
	return Actions{Send: c.send(frame, now)}
}

// NextWakeup is when Tick must run next; zero once closed.
func (c *Core) NextWakeup() time.Time {
	switch c.state {
	case Closed:
		return time.Time{}
	case TimedOut:
		return c.LeaseEnd()
	}
	deadline := c.ValidUntil()
	if c.inFlight {
		return deadline
	}
	if next := c.lastSend.Add(c.sched.Interval()); next.Before(deadline) {
		return next
	}
	return deadline
}

// Tick lets time pass: the deadline, a due heartbeat, the close of a lost
// session at the end of its lease.
func (c *Core) Tick(now time.Time) Actions {
	switch c.state {
	case Closed:
		return Actions{}
	case TimedOut:
		if !now.Before(c.LeaseEnd()) {
			c.state = Closed
			return Actions{Close: true}
		}
		return Actions{}
	}
	if a, over := c.Poll(now); over {
		return a
	}
	if !c.inFlight && !now.Before(c.lastSend.Add(c.sched.Interval())) {
		return Actions{Send: c.send(heartbeatFrame, now)}
	}
	return Actions{}
}

// Poll checks the deadline only, as a polled validity check does: past
// it, every held claim is lost and every other fails. over reports that
// the session is no longer live.
func (c *Core) Poll(now time.Time) (a Actions, over bool) {
	switch c.state {
	case Closed, TimedOut:
		return Actions{}, true
	}
	if now.Before(c.ValidUntil()) {
		return Actions{}, false
	}
	return c.end(Cause{Kind: session.CauseTimeout}), true
}

// OpenClaim hands in a claim's ACQUIRE (already validated, with the
// session's lease) and returns its stream id and the OPEN to send. The
// owner sends OPENs in the order of their ids.
func (c *Core) OpenClaim(acquire []byte, try bool) (id uint32, frame []byte, err error) {
	if c.state != Live {
		return 0, nil, ErrNotLive
	}
	if c.lastID == math.MaxUint32 {
		return 0, nil, ErrIDsExhausted
	}
	c.lastID++
	c.claims[c.lastID] = &claim{try: try}
	frame = protocol.AppendStreamHeader(make([]byte, 0, 5+len(acquire)), protocol.MsgOpen, c.lastID)
	return c.lastID, append(frame, acquire...), nil
}

// OpenWatch hands in a watch's WATCH (already validated, with the
// session's lease), sent at now, and returns its stream id and the OPEN
// to send, as OpenClaim does.
func (c *Core) OpenWatch(watch []byte, now time.Time) (id uint32, frame []byte, err error) {
	id, frame, err = c.OpenClaim(watch, false)
	if err == nil {
		cl := c.claims[id]
		cl.watch, cl.phase, cl.openSent = true, watching, now
	}
	return id, frame, err
}

// Proclaim hands in a PROCLAIM (already validated) for a waiting or held
// claim and returns its number (Proclaimed events name the last one
// acknowledged) and the ON to send; seq 0: the claim is not live.
func (c *Core) Proclaim(id uint32, proclaim []byte) (seq uint64, frame []byte) {
	cl := c.claims[id]
	if c.state != Live || cl == nil || (cl.phase != waiting && cl.phase != held) {
		return 0, nil
	}
	c.ons++
	cl.ons = append(cl.ons, c.ons)
	frame = protocol.AppendStreamHeader(make([]byte, 0, 5+len(proclaim)), protocol.MsgOn, id)
	return c.ons, append(frame, proclaim...)
}

// Release is the application letting a claim go (release, or an Acquire
// given up): from now on it is released for the client, and frames of
// its stream are dropped. frame is the RELEASE to send, nil when the
// server has ended the stream or the session is over (nothing to send;
// released says the claim is already done).
func (c *Core) Release(id uint32) (frame []byte, released bool) {
	cl := c.claims[id]
	if cl == nil || c.state != Live {
		return nil, true
	}
	if cl.phase == releasing {
		return nil, false // RELEASED will come
	}
	cl.phase, cl.ons = releasing, nil
	return protocol.AppendStreamHeader(nil, protocol.MsgRelease, id), false
}

// Close is the application closing the session: every claim counts as
// released (none is told lost, a claim not granted yet is told Released
// too), and the connection closes at once, which
// releases them on the server.
func (c *Core) Close() Actions {
	if c.state == Closed {
		return Actions{}
	}
	var a Actions
	for id := range c.claims {
		a.Events = append(a.Events, Event{Stream: id, Kind: Released})
	}
	clear(c.claims)
	if c.ended == nil {
		c.ended = &Cause{Kind: session.CauseIO, Err: ErrNotLive}
	}
	c.state = Closed
	a.Close = true
	return a
}

// ServerError is an ERROR's type byte, with its code and reason if they
// came with it: it ends the whole session at once.
func (c *Core) ServerError(code uint8, coded bool, reason string) Actions {
	switch c.state {
	case Closed:
		return Actions{}
	case TimedOut:
		c.state = Closed
		return Actions{Close: true}
	}
	a := c.end(Cause{Kind: session.CauseServer, Code: code, Coded: coded, Reason: reason})
	c.state, a.Close = Closed, true
	return a
}

// BadBytes is bytes from the server that start no session frame: the
// session ends. first says whether they were the first bytes it sent
// (then it is no monolock server; quoted holds them).
func (c *Core) BadBytes(err error, first bool, quoted string) Actions {
	if c.state == Closed {
		return Actions{}
	}
	cause := Cause{Kind: session.CauseProtocol, Reason: err.Error()}
	if first {
		cause = Cause{Kind: session.CauseNotMonolock, Reason: quoted}
	}
	return c.fatal(cause)
}

// ConnectionEnded is the connection's end (EOF, reset, I/O error): every
// stream ends with it.
func (c *Core) ConnectionEnded(err error) Actions {
	switch c.state {
	case Closed:
		return Actions{}
	case TimedOut:
		c.state = Closed
		return Actions{Close: true}
	}
	return c.fatal(Cause{Kind: session.CauseIO, Err: err})
}

// fatal ends a live session for good: tell, then close.
func (c *Core) fatal(cause Cause) Actions {
	a := c.end(cause)
	c.state, a.Close = Closed, true
	return a
}

// Frame takes one whole server frame that arrived at now (an ERROR goes
// to ServerError at its type byte instead).
func (c *Core) Frame(f protocol.SessionFrame, now time.Time) Actions {
	switch c.state {
	case Closed, TimedOut:
		return Actions{} // a late reply revives nothing
	}
	// The deadline first: once it has passed, nothing still in the
	// receive buffer (a late ALIVE, a grant) can save the claims.
	if a, over := c.Poll(now); over {
		return a
	}
	var a Actions
	var err error
	switch f.Type {
	case protocol.MsgSessionOK:
		if c.state != Connecting {
			err = errors.New("a second SESSION_OK")
			break
		}
		if err = c.ack(now); err == nil {
			c.state, c.maxStreams, a.Ready = Live, f.MaxStreams, true
		}
	case protocol.MsgAlive:
		if c.state != Live {
			err = errors.New("ALIVE before SESSION_OK")
			break
		}
		if err = c.ack(now); err == nil {
			c.vouchWatches(&a)
		}
	case protocol.MsgStream:
		err = c.stream(f, &a)
	case protocol.MsgReleased:
		err = c.released(f.Stream, &a)
	case protocol.MsgStreamEnd:
		err = c.streamEnd(f, &a)
	default:
		err = fmt.Errorf("unexpected session frame 0x%02x", f.Type)
	}
	if err != nil {
		b := c.fatal(Cause{Kind: session.CauseProtocol, Reason: err.Error()})
		b.Events = append(a.Events, b.Events...)
		return b
	}
	a.Send = append(a.Send, c.Tick(now).Send...)
	return a
}

// known reports whether id was opened on this session (its claim may be
// gone since: a frame of it crossed the RELEASE or the end).
func (c *Core) known(id uint32) bool { return id != 0 && id <= c.lastID }

func (c *Core) stream(f protocol.SessionFrame, a *Actions) error {
	cl := c.claims[f.Stream]
	if cl == nil {
		if !c.known(f.Stream) {
			return fmt.Errorf("a STREAM of stream %d, never opened", f.Stream)
		}
		return nil
	}
	if cl.watch {
		return c.watchFrame(f, cl, a)
	}
	if f.Inner != protocol.MsgWaiting && f.Inner != protocol.MsgAcquired {
		if cl.phase == releasing {
			return nil
		}
		return fmt.Errorf("a frame of type 0x%02x on claim stream %d", f.Inner, f.Stream)
	}
	switch cl.phase {
	case releasing:
		return nil
	case opening:
		if f.Inner == protocol.MsgWaiting {
			if cl.try {
				cl.abandon = &Cause{Kind: session.CauseBusy}
				cl.phase = releasing
				a.Send = protocol.AppendStreamHeader(nil, protocol.MsgRelease, f.Stream)
				return nil
			}
			cl.phase = waiting
			a.Events = append(a.Events, Event{Stream: f.Stream, Kind: Waiting})
			return nil
		}
		c.grant(f.Stream, cl, f.Token, a)
		return nil
	case waiting:
		if f.Inner == protocol.MsgAcquired {
			// The promotion; the reply to an ON in flight follows it.
			c.grant(f.Stream, cl, f.Token, a)
			return nil
		}
		return c.onAck(f.Stream, cl, a)
	}
	// Held: only the replies to ONs, each with the claim's token.
	if f.Inner == protocol.MsgWaiting {
		return fmt.Errorf("WAITING for held stream %d", f.Stream)
	}
	if f.Token != cl.token {
		return fmt.Errorf("the token of stream %d changed", f.Stream)
	}
	return c.onAck(f.Stream, cl, a)
}

// vouchWatches: an ALIVE comes after every frame queued before its
// HEARTBEAT was read, so it vouches for every started watch's picture as
// of the HEARTBEAT's send (never for one opened after that send).
func (c *Core) vouchWatches(a *Actions) {
	for id, cl := range c.claims {
		if cl.watch && cl.started && cl.phase == watching && !c.acked.Before(cl.openSent) {
			a.Events = append(a.Events, Event{Stream: id, Kind: WatchAlive, At: c.acked})
		}
	}
}

// watchFrame takes a frame of a watch stream: its EVENTs, then one
// WATCHING.
func (c *Core) watchFrame(f protocol.SessionFrame, cl *claim, a *Actions) error {
	switch {
	case cl.phase == releasing:
		return nil
	case f.Inner == protocol.MsgEvent:
		a.Events = append(a.Events, Event{Stream: f.Stream, Kind: WatchEvent, WatchEvent: f.Event})
		return nil
	case f.Inner == protocol.MsgWatching && !cl.started:
		cl.started = true
		a.Events = append(a.Events, Event{Stream: f.Stream, Kind: WatchStarted, Epoch: f.Epoch, Seq: f.Seq, At: cl.openSent})
		return nil
	}
	return fmt.Errorf("a frame of type 0x%02x on watch stream %d", f.Inner, f.Stream)
}

func (c *Core) grant(id uint32, cl *claim, token uint64, a *Actions) {
	cl.phase, cl.token = held, token
	a.Events = append(a.Events, Event{Stream: id, Kind: Granted, Token: token})
}

func (c *Core) onAck(id uint32, cl *claim, a *Actions) error {
	if len(cl.ons) == 0 {
		return fmt.Errorf("a reply on stream %d with nothing asked", id)
	}
	seq := cl.ons[0]
	cl.ons = cl.ons[1:]
	a.Events = append(a.Events, Event{Stream: id, Kind: Proclaimed, Seq: seq})
	return nil
}

func (c *Core) released(id uint32, a *Actions) error {
	cl := c.claims[id]
	if cl == nil || cl.phase != releasing {
		return fmt.Errorf("RELEASED of stream %d, which was not released", id)
	}
	delete(c.claims, id)
	if cl.abandon != nil {
		a.Events = append(a.Events, Event{Stream: id, Kind: Failed, Cause: cl.abandon})
		return nil
	}
	a.Events = append(a.Events, Event{Stream: id, Kind: Released})
	return nil
}

func (c *Core) streamEnd(f protocol.SessionFrame, a *Actions) error {
	cl := c.claims[f.Stream]
	if cl == nil {
		if !c.known(f.Stream) {
			return fmt.Errorf("STREAM_END of stream %d, never opened", f.Stream)
		}
		return nil
	}
	if cl.phase == releasing {
		return nil // RELEASED follows: the two crossed
	}
	delete(c.claims, f.Stream)
	cause := &Cause{Kind: session.CauseServer, Code: f.Code, Coded: true, Reason: f.Reason}
	kind := Failed
	if cl.phase == held {
		kind = Lost
	}
	a.Events = append(a.Events, Event{Stream: f.Stream, Kind: kind, Cause: cause})
	return nil
}

// end finishes every stream with cause: held claims are lost, others
// fail, claims being released are released. By timeout the session is
// TimedOut (the connection stays open until the lease ends); the caller
// closes it otherwise.
func (c *Core) end(cause Cause) Actions {
	var a Actions
	for id, cl := range c.claims {
		ev := Event{Stream: id, Kind: Failed, Cause: &cause}
		switch {
		case cl.phase == releasing && cl.abandon != nil:
			ev.Cause = cl.abandon
		case cl.phase == releasing:
			ev = Event{Stream: id, Kind: Released}
		case cl.phase == held:
			ev.Kind = Lost
		}
		a.Events = append(a.Events, ev)
	}
	clear(c.claims)
	c.ended, a.Ended = &cause, &cause
	c.inFlight = false
	c.state = TimedOut
	return a
}

func (c *Core) send(frame []byte, now time.Time) []byte {
	c.lastSend, c.inFlight = now, true
	return frame
}

// ack takes the reply to the SESSION or HEARTBEAT in flight: an RTT
// sample, and every claim is now valid from that request's send.
func (c *Core) ack(now time.Time) error {
	if !c.inFlight {
		return errors.New("a reply with no request in flight")
	}
	c.inFlight = false
	c.sched.Observe(now.Sub(c.lastSend))
	c.acked = c.lastSend
	return nil
}
