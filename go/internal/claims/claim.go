// Package claims is the server's claim layer. It sits between the
// connections, which read and write frames, and the lock table, which
// decides who holds what; calls go one way, down:
//
//	connection (package server) → claims → locktable
//
// and come back up only through a claim's Sink. A claim is its own
// object: an id, a lease, a mode, and a sink to deliver its messages to.
// Today each connection carries one; the layer does not assume it. A
// claim whose connection is gone (a holder held back after a reset) stays
// a claim, listed, counted and kickable; a connection with no claim at all
// (a watch of a name) never enters it.
//
// This layer owns the rules of a claim's life: its admission (one pure
// step, admission), its lease on record before it is acknowledged, its
// place in the table, the holds that keep a lock from the next waiter
// (a reset holder, a lock delay, a previous run's or leader's holders),
// the hand-over to the promoted waiters, and the listing.
package claims

import (
	"errors"
	"sync/atomic"

	"github.com/monolock/monolock/go/internal/leaserecord"
	"github.com/monolock/monolock/go/internal/locktable"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// Sink is where a claim's messages go: its connection today, a stream of
// a session later. Its methods are called outside the layer's locks.
type Sink interface {
	// Granted tells the client that the claim holds its lock now, with
	// token, and reports whether it was told: false when the sink is
	// ending (it then releases the claim itself).
	Granted(token uint64) bool
	// End tells the client that the claim is over for code and reason
	// (kicked, the server stepping down, no fencing token to give), then
	// releases the claim (Registry.Release): the client hears before
	// anyone else is granted the lock. It reports whether this call ended
	// the claim.
	End(code *protocol.Error, reason string) bool
	// Peer describes the client for the listing: its address and its
	// identity ("" when anonymous).
	Peer() (remote, identity string)
}

// Claim is one claim on one lock name. Its zero value is ready for Init;
// it is embedded in what carries it, so that a claim costs no allocation
// of its own.
type Claim struct {
	entry   locktable.Claim // entry.Session is the claim's id
	sink    Sink
	leaseMS atomic.Uint32 // the client's lease once admitted into the record, for the listing
	// value is the claim's value (protocol version 3), replaced whole by
	// Proclaim; nil for none.
	value atomic.Pointer[[]byte]

	// record is the lease record the claim was admitted into (the data
	// directory's, or the cell's of the term that admitted it); nil when
	// it was not.
	record *leaserecord.Record

	// Guarded by Registry.mu.
	ended bool      // released, expired or reset: it never enters the table again
	hold  *heldBack // while it is held back after its end
}

// Init gives a fresh claim its id, unique in the server's run, and its sink.
func (c *Claim) Init(id uint64, sink Sink) {
	c.entry.Session = id
	c.sink = sink
}

// ID is the claim's id.
func (c *Claim) ID() uint64 { return c.entry.Session }

// Token is the claim's fencing token, 0 while it is waiting.
func (c *Claim) Token() uint64 { return c.entry.Token() }

// Value is the claim's value, nil for none. The caller must not change it.
func (c *Claim) Value() []byte {
	if v := c.value.Load(); v != nil {
		return *v
	}
	return nil
}

// LeaseMS is the claim's lease in milliseconds once admitted, else 0.
func (c *Claim) LeaseMS() uint32 { return c.leaseMS.Load() }

// WireError is a refusal or end with the protocol's code and a reason
// that replaces the code's canonical text ("" keeps it).
type WireError struct {
	Code   *protocol.Error
	Reason string
}

func (e *WireError) Error() string { return e.Code.Error() + ": " + e.Reason }

// ErrEnded is Admit's error for a claim that ended (its connection was
// kicked or closed) before it could enter the table.
var ErrEnded = errors.New("claim ended before it was admitted")
