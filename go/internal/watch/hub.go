// Package watch keeps the histories of watched lock names and the queues
// of their watchers (protocol version 3).
//
// Every change of a watched name is one event with the next sequence
// number of the name's history; the history keeps the last few encoded
// frames, so that a watcher that reconnects resumes where it left off.
// An epoch, drawn at random whenever a history starts, tells a resuming
// watcher whether its sequence numbers still mean anything: a history
// that was dropped (no watcher for a while, a restart, a change of HA
// leader) starts over under a new epoch, and the watcher gets a snapshot.
//
// The claim layer emits the events under its own lock, so a name's events
// are numbered in the order its state changed, and a snapshot sees the
// state after exactly the events numbered before it. Nothing here blocks:
// events go into each watcher's queue, which its connection writes out; a
// watcher whose queue passes its bound is cut off (it reconnects and
// resumes), never skipped.
package watch

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/monolock/monolock/go/internal/spec"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// HistoryLen is how many events of a name a resuming watcher can be behind.
const HistoryLen = spec.WatchHistoryLen

// QueueLimit is how many bytes of live events may wait for a watcher's
// connection before the watcher is cut off. A snapshot is not counted: it
// is as large as the name's state, and is sent once.
const QueueLimit = spec.WatchQueueLimitBytes

// keepIdle is how long a name's history outlives its last watcher, so that
// a watcher that reconnects within it resumes instead of resyncing.
const keepIdle = time.Minute

// Hub is every watched name's history and watchers. Its methods are
// called under the claim layer's lock, and take only the hub's and the
// watchers' own.
type Hub struct {
	// histories is len(names), readable without mu: while no name is
	// watched, a change of any lock (every grant and release) skips the
	// hub's mutex altogether. Subscribe and Watched both run under the
	// claim layer's lock, which orders them.
	histories atomic.Int64

	mu        sync.Mutex
	names     map[string]*history
	lastSweep time.Time
	now       func() time.Time
}

// New returns an empty hub.
func New() *Hub {
	return &Hub{names: make(map[string]*history), now: time.Now}
}

// history is one name's numbered events and its watchers.
type history struct {
	epoch, seq uint64
	ring       [HistoryLen][]byte // the frame of event seq is ring[seq % HistoryLen]
	watchers   map[*Watcher]struct{}
	idleSince  time.Time // when its last watcher left; zero while watched
}

// kept reports whether h still holds the event after seq, and every one
// up to its newest.
func (h *history) kept(seq uint64) bool {
	return seq <= h.seq && h.seq-seq < HistoryLen
}

// Watched reports whether name has a history, so that a change of it is
// an event. The claim layer asks first, and builds no event otherwise.
func (hub *Hub) Watched(name string) bool {
	if hub.histories.Load() == 0 {
		return false
	}
	hub.mu.Lock()
	defer hub.mu.Unlock()
	return hub.names[name] != nil
}

// Watchers counts name's live watches, for the listing.
func (hub *Hub) Watchers(name string) int {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	if h := hub.names[name]; h != nil {
		return len(h.watchers)
	}
	return 0
}

// Emit numbers e as the next event of its name's history and queues it
// for every watcher of the name. A name without a history has nobody to
// tell and nothing to keep.
func (hub *Hub) Emit(name string, e *protocol.Event) {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	h := hub.names[name]
	if h == nil {
		return
	}
	h.seq++
	e.Epoch, e.Seq = h.epoch, h.seq
	frame := protocol.AppendEvent(nil, e)
	h.ring[h.seq%HistoryLen] = frame
	for w := range h.watchers {
		w.push(frame, false)
	}
}

// Snapshot builds the frames of a name's state, numbered epoch and seq
// (the last event the state includes), the first marked resync when
// asked: one slice per frame, so that a watcher can put each in its
// envelope.
type Snapshot func(epoch, seq uint64, resync bool) [][]byte

// Subscribe makes w a watcher of name, starting after (epoch, seq): from
// the history when it still holds that point, else with a snapshot
// (marked resync when the watcher asked to resume); then a WATCHING. Called under the
// claim layer's lock, so that no event of the name comes between the
// snapshot and the live events.
func (hub *Hub) Subscribe(w *Watcher, name string, epoch, seq uint64, snapshot Snapshot) {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	hub.sweepLocked()
	h := hub.names[name]
	if h == nil {
		h = &history{epoch: newEpoch(), watchers: make(map[*Watcher]struct{})}
		hub.names[name] = h
		hub.histories.Add(1)
	}
	h.watchers[w] = struct{}{}
	h.idleSince = time.Time{}
	w.h = h
	if epoch == h.epoch && h.kept(seq) {
		for s := seq + 1; s <= h.seq; s++ {
			w.push(h.ring[s%HistoryLen], true)
		}
	} else {
		for _, frame := range snapshot(h.epoch, h.seq, epoch != 0) {
			w.push(frame, true)
		}
	}
	// The WATCH is answered as a HEARTBEAT is: its WATCHING vouches for
	// the state up to it, also when there was nothing to resume.
	w.push(protocol.AppendWatching(nil, h.epoch, h.seq), true)
}

// Ack queues the WATCHING that answers w's HEARTBEAT: the newest event
// queued for it, which the connection writes after that event.
func (hub *Hub) Ack(w *Watcher) {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	if w.h != nil {
		w.push(protocol.AppendWatching(nil, w.h.epoch, w.h.seq), true)
	}
}

// Unsubscribe ends w's watch. Its name's history stays for keepIdle after
// its last watcher left.
func (hub *Hub) Unsubscribe(w *Watcher) {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	if h := w.h; h != nil {
		delete(h.watchers, w)
		if len(h.watchers) == 0 {
			h.idleSince = hub.now()
		}
		w.h = nil
	}
}

// Forget drops every history, for a server that stops leading its HA
// cell: what another leader does next is not in them, so a watcher that
// comes back must get a new epoch and a snapshot.
func (hub *Hub) Forget() {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	for name, h := range hub.names {
		for w := range h.watchers {
			w.h = nil
		}
		delete(hub.names, name)
	}
	hub.histories.Store(0)
}

// sweepLocked drops the histories idle for longer than keepIdle, at most
// once per keepIdle: the cost of a walk over the names is spread over a
// minute of subscriptions.
func (hub *Hub) sweepLocked() {
	now := hub.now()
	if now.Sub(hub.lastSweep) < keepIdle {
		return
	}
	hub.lastSweep = now
	for name, h := range hub.names {
		if !h.idleSince.IsZero() && now.Sub(h.idleSince) > keepIdle {
			delete(hub.names, name)
			hub.histories.Add(-1)
		}
	}
}

// newEpoch draws a history's epoch: random, so that a restarted server
// (whose histories are gone) never reuses one; never 0, which a fresh
// WATCH sends.
func newEpoch() uint64 { return rand.Uint64() | 1 }
