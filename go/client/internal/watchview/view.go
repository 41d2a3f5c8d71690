// Package watchview is a watch's picture of one lock name, built from the
// server's EVENTs (protocol version 3), with no sockets and no clock of
// its own: the caller passes the time each event arrived.
//
// It checks what the server promises: every live event is the one after
// the last (same epoch, seq + 1), and an epoch changes only with a
// snapshot. A view that breaks that cannot vouch for its state, so Apply
// fails and the watch starts over.
package watchview

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// Holder is one holder of the name.
type Holder struct {
	Token    uint64
	Shared   bool
	Limit    uint16
	Identity string
	Value    []byte
	// HeldBackUntil is set while the holder's connection is gone but the
	// server keeps its place (a reset, a lock delay): it may still act.
	HeldBackUntil time.Time
}

// Waiter is one claim in the name's queue: a candidate, in an election.
type Waiter struct {
	Arrival  uint64
	Shared   bool
	Limit    uint16
	Identity string
	Value    []byte
}

// View is the state of a name as the events told it.
type View struct {
	Epoch, Seq uint64
	Holders    []Holder // in grant order
	Waiters    []Waiter // in queue order
	// BlockedUntil: nobody is granted the name before it (a restart's or
	// a failover's wait for holders the server does not know).
	BlockedUntil time.Time

	started bool
	next    *View // the snapshot being read, until its end
}

// ErrGap is an event that does not follow the last one: something was
// missed, and the view cannot vouch for its state.
var ErrGap = errors.New("watch: an event out of order")

// Started reports whether a whole snapshot (or a resume) has been taken.
func (v *View) Started() bool { return v.started && v.next == nil }

// Resume marks the view as continuing from (epoch, seq) of an earlier
// connection: the server will send the events after it, or a snapshot.
func (v *View) Resume() { v.next = nil }

// Apply takes one event that arrived at now.
func (v *View) Apply(e protocol.Event, now time.Time) error {
	if v.next != nil {
		return v.applySnapshot(e, now)
	}
	if e.Kind == protocol.EventSnapshot {
		v.next = &View{Epoch: e.Epoch, Seq: e.Seq}
		if e.MS > 0 {
			v.next.BlockedUntil = now.Add(ms(e.MS))
		}
		return nil
	}
	if !v.started || e.Epoch != v.Epoch || e.Seq != v.Seq+1 {
		return fmt.Errorf("%w: epoch %d seq %d after epoch %d seq %d", ErrGap, e.Epoch, e.Seq, v.Epoch, v.Seq)
	}
	v.Seq = e.Seq
	return v.applyLive(e, now)
}

// applySnapshot takes an event inside a snapshot: its holders and waiters
// with the snapshot's own (epoch, seq), then its end.
func (v *View) applySnapshot(e protocol.Event, now time.Time) error {
	n := v.next
	if e.Epoch != n.Epoch || e.Seq != n.Seq {
		return fmt.Errorf("%w: a snapshot's event numbered apart from it", ErrGap)
	}
	switch e.Kind {
	case protocol.EventHolder:
		n.Holders = append(n.Holders, holder(e, now))
	case protocol.EventWaiter:
		n.Waiters = append(n.Waiters, waiter(e))
	case protocol.EventSnapshotEnd:
		*v = *n
		v.started, v.next = true, nil
	default:
		return fmt.Errorf("%w: event kind %d inside a snapshot", ErrGap, e.Kind)
	}
	return nil
}

func (v *View) applyLive(e protocol.Event, now time.Time) error {
	switch e.Kind {
	case protocol.EventGranted:
		v.Waiters = slices.DeleteFunc(v.Waiters, func(w Waiter) bool { return w.Arrival == e.Arrival })
		v.Holders = append(v.Holders, holder(e, now))
	case protocol.EventValue:
		if h := v.holder(e.Token); h != nil {
			h.Value = e.Value
		}
	case protocol.EventEnded:
		v.Holders = slices.DeleteFunc(v.Holders, func(h Holder) bool { return h.Token == e.Token })
	case protocol.EventHeldBack:
		if h := v.holder(e.Token); h != nil {
			h.HeldBackUntil = now.Add(ms(e.MS))
		}
	case protocol.EventQueued:
		w := waiter(e)
		if i := slices.IndexFunc(v.Waiters, func(x Waiter) bool { return x.Arrival == e.Arrival }); i >= 0 {
			v.Waiters[i] = w // a waiter's new value
		} else {
			v.Waiters = append(v.Waiters, w)
		}
	case protocol.EventLeft:
		v.Waiters = slices.DeleteFunc(v.Waiters, func(w Waiter) bool { return w.Arrival == e.Arrival })
	case protocol.EventBlocked:
		if until := now.Add(ms(e.MS)); until.After(v.BlockedUntil) {
			v.BlockedUntil = until
		}
	default:
		return fmt.Errorf("%w: event kind %d outside a snapshot", ErrGap, e.Kind)
	}
	return nil
}

func (v *View) holder(token uint64) *Holder {
	for i := range v.Holders {
		if v.Holders[i].Token == token {
			return &v.Holders[i]
		}
	}
	return nil
}

func holder(e protocol.Event, now time.Time) Holder {
	h := Holder{Token: e.Token, Shared: e.Mode == protocol.ModeShared, Limit: e.Limit, Identity: e.Identity, Value: e.Value}
	if e.MS > 0 {
		h.HeldBackUntil = now.Add(ms(e.MS))
	}
	return h
}

func waiter(e protocol.Event) Waiter {
	return Waiter{Arrival: e.Arrival, Shared: e.Mode == protocol.ModeShared, Limit: e.Limit, Identity: e.Identity, Value: e.Value}
}

func ms(n uint32) time.Duration { return time.Duration(n) * time.Millisecond }

// Clone returns a copy that shares nothing mutable with v.
func (v *View) Clone() View {
	c := View{Epoch: v.Epoch, Seq: v.Seq, BlockedUntil: v.BlockedUntil, started: v.started}
	c.Holders = slices.Clone(v.Holders)
	c.Waiters = slices.Clone(v.Waiters)
	return c
}
