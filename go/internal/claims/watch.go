package claims

import (
	"net"
	"time"

	"github.com/monolock/monolock/go/internal/locktable"
	"github.com/monolock/monolock/go/internal/peer"
	"github.com/monolock/monolock/go/internal/watch"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// A watch (protocol version 3) is no claim: it never enters the table or
// the lease record. The layer tells it of every change of its name as an
// event, emitted under r.mu at the change itself, so that a name's events
// are numbered in the order its state changed and a snapshot, taken under
// r.mu too, sees exactly the changes numbered before it.

// WatchRequest is a validated WATCH.
type WatchRequest struct {
	Name       string
	Epoch, Seq uint64
	Conn       net.Conn // for the ACL
}

// Watcher is the ACL's extension for watches: an Authorizer that also
// has AuthorizeWatch decides watches with it; one without it lets
// whoever may take a name watch it.
type Watcher interface {
	AuthorizeWatch(conn net.Conn, name string) error
}

// Watch makes w a watcher of req.Name: its queue gets the name's state
// (or the events since req's point, if the history still holds them),
// then every change. A refusal is a *WireError: the ACL (0x18), or a
// server that is not the active one of its cell (0x03).
func (r *Registry) Watch(w *watch.Watcher, req WatchRequest) error {
	if err := r.authorizeWatch(req); err != nil {
		r.logACLRefusal(Request{Name: req.Name, Conn: req.Conn})
		return err
	}
	if err := r.MayAcknowledge(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.watches.Subscribe(w, req.Name, req.Epoch, req.Seq, func(epoch, seq uint64, resync bool) [][]byte {
		return r.snapshotLocked(req.Name, epoch, seq, resync)
	})
	return nil
}

func (r *Registry) authorizeWatch(req WatchRequest) error {
	var err error
	switch a := r.authorizer.(type) {
	case nil:
		return nil
	case Watcher:
		err = a.AuthorizeWatch(req.Conn, req.Name)
	default:
		err = a.Authorize(req.Conn, req.Name)
	}
	if err != nil {
		return &WireError{protocol.ErrNotAuthorized, err.Error()}
	}
	return nil
}

// Unwatch ends w's watch.
func (r *Registry) Unwatch(w *watch.Watcher) { r.watches.Unsubscribe(w) }

// Acknowledge queues the WATCHING that answers a watcher's HEARTBEAT,
// after the events queued before it.
func (r *Registry) Acknowledge(w *watch.Watcher) { r.watches.Ack(w) }

// ForgetHistories drops the watched names' histories, for a server that
// stops leading its cell: a watcher that comes back gets a new epoch.
func (r *Registry) ForgetHistories() { r.watches.Forget() }

// snapshotLocked encodes name's state: a SNAPSHOT, each holder (held
// back ones with how much longer), each waiter in queue order, and
// SNAPSHOT_END, a frame each. Caller holds r.mu.
func (r *Registry) snapshotLocked(name string, epoch, seq uint64, resync bool) [][]byte {
	holders, waiters, blocked := r.table.Whole(name)
	now := time.Now()
	head := protocol.Event{Kind: protocol.EventSnapshot, Resync: resync,
		Holders: uint32(len(holders)), Waiters: uint32(len(waiters))}
	if blocked {
		head.MS = msUntil(r.blockEnds[name], now)
	}
	out := make([][]byte, 0, 2+len(holders)+len(waiters))
	frame := func(e protocol.Event) {
		e.Epoch, e.Seq = epoch, seq
		out = append(out, protocol.AppendEvent(nil, &e))
	}
	frame(head)
	for _, h := range holders {
		e := r.describeEntry(h, protocol.EventHolder)
		if c := r.claims[h.Session]; c != nil && c.hold != nil {
			e.MS = max(msUntil(c.hold.until, now), 1) // held back, however briefly
		}
		frame(e)
	}
	for _, w := range waiters {
		frame(r.describeEntry(w, protocol.EventWaiter))
	}
	frame(protocol.Event{Kind: protocol.EventSnapshotEnd})
	return out
}

// describeEntry is a table entry as a holder or waiter event.
func (r *Registry) describeEntry(en locktable.Entry, kind uint8) protocol.Event {
	e := protocol.Event{Kind: kind, Token: en.Token, Arrival: en.Arrival, Limit: en.Limit}
	if en.Shared {
		e.Mode = protocol.ModeShared
	}
	if c := r.claims[en.Session]; c != nil {
		e.Identity, e.Value = c.identity(), c.Value()
	}
	return e
}

// asEvent is c as an event of kind: a grant, a holder or a waiter.
func asEvent(c *Claim, kind uint8) protocol.Event {
	e := protocol.Event{Kind: kind, Token: c.Token(), Arrival: c.entry.Arrival(), Limit: c.entry.Limit,
		Identity: c.identity(), Value: c.Value()}
	if c.entry.Shared {
		e.Mode = protocol.ModeShared
	}
	return e
}

// identity names c's client to watchers: its certificate's identity, or
// its address when it has none.
func (c *Claim) identity() string {
	remote, id := c.sink.Peer()
	if id == "" || id == peer.Anonymous {
		return remote
	}
	return id
}

// emit tells name's watchers of e, if it has any. Caller holds r.mu.
func (r *Registry) emit(name string, e protocol.Event) {
	r.watches.Emit(name, &e)
}

// watched reports whether a change of name is an event; events are built
// only then. Caller holds r.mu.
func (r *Registry) watched(name string) bool { return r.watches.Watched(name) }

// emitEntered tells of c's entry into the table: a grant, or a place in
// the queue. Caller holds r.mu.
func (r *Registry) emitEntered(c *Claim, granted bool) {
	if !r.watched(c.entry.Name) {
		return
	}
	if granted {
		r.emit(c.entry.Name, asEvent(c, protocol.EventGranted))
		return
	}
	r.emit(c.entry.Name, asEvent(c, protocol.EventQueued))
}

// emitGrants tells of the grants of promoted claims. Caller holds r.mu.
func (r *Registry) emitGrants(granted []*Claim) {
	for _, c := range granted {
		if r.watched(c.entry.Name) {
			r.emit(c.entry.Name, asEvent(c, protocol.EventGranted))
		}
	}
}

// emitEnd tells of c leaving the table: a holding that ended (why), or a
// waiter that left the queue. Caller holds r.mu.
func (r *Registry) emitEnd(c *Claim, held bool, why uint8) {
	if !r.watched(c.entry.Name) {
		return
	}
	if held {
		r.emit(c.entry.Name, protocol.Event{Kind: protocol.EventEnded, Token: c.Token(), Why: why})
		return
	}
	r.emit(c.entry.Name, protocol.Event{Kind: protocol.EventLeft, Arrival: c.entry.Arrival()})
}

// emitHeldBack tells of a holder held back until until. Caller holds r.mu.
func (r *Registry) emitHeldBack(c *Claim, until time.Time, why uint8) {
	if r.watched(c.entry.Name) {
		r.emit(c.entry.Name, protocol.Event{Kind: protocol.EventHeldBack, Token: c.Token(), Why: why,
			MS: max(msUntil(until, time.Now()), 1)})
	}
}

// emitValue tells of c's new value: a holder's, or a waiter's queue entry
// anew. Caller holds r.mu.
func (r *Registry) emitValue(c *Claim) {
	if !r.watched(c.entry.Name) {
		return
	}
	if tok := c.Token(); tok != 0 {
		r.emit(c.entry.Name, protocol.Event{Kind: protocol.EventValue, Token: tok, Value: c.Value()})
		return
	}
	r.emit(c.entry.Name, asEvent(c, protocol.EventQueued))
}

// emitBlocked tells of a block on name until until. Caller holds r.mu.
func (r *Registry) emitBlocked(name string, until time.Time, why uint8) {
	if r.watched(name) {
		r.emit(name, protocol.Event{Kind: protocol.EventBlocked, MS: max(msUntil(until, time.Now()), 1), Why: why})
	}
}

// msUntil is the time from now to t in whole milliseconds, rounded up (a
// watcher must never think a hold over early), 0 if t has passed.
func msUntil(t, now time.Time) uint32 {
	d := t.Sub(now)
	if d <= 0 {
		return 0
	}
	return uint32(min((d+time.Millisecond-1)/time.Millisecond, 1<<32-1))
}
