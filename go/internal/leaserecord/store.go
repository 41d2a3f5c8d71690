package leaserecord

import "time"

// A Store keeps a record durably: a file in the data directory (OpenFile),
// or keys in an HA cell's etcd (package ha). The Record decides what to
// state; a store only makes it durable.
type Store interface {
	// Load returns what the record states: the wait for every lock, and
	// the waits by name (none at 0).
	Load() (all time.Duration, locks map[string]time.Duration, err error)
	// Write makes c durable before it returns nil. After a failure the
	// Record's next write is a full one.
	Write(c Change) error
	// WantsFull reports whether the next write should state the whole
	// record (a file that grew by appends compacts so).
	WantsFull() bool
	// Close releases the store; nothing is written after.
	Close()
}

// Change is one write of a record.
type Change struct {
	// Full: the change states the whole record; a name it leaves out is
	// dropped.
	Full bool
	// All is the wait for every lock, when AllSet (always, when Full).
	All    time.Duration
	AllSet bool
	// Locks are waits by name; a wait of 0 drops the name (never, when
	// Full: a full change states only what is in force).
	Locks []Statement
}

// Statement is what a record says of one lock: hold it back that long
// from the next start (the next leader's takeover, in an HA cell).
type Statement struct {
	Name string
	Wait time.Duration
	// Permits, when set, narrows the wait: only shared holders held back
	// with Limit may still count on the lock, each for its own wait (the
	// longest is Wait), so the next start keeps those permits taken
	// instead of the whole name. Only the record of a clean stop says
	// it; a store that cannot keep it (permitStore) states Wait for the
	// whole name, which is never shorter.
	Permits []time.Duration
	Limit   uint16
}

// permitStore is a Store that keeps Statement.Permits: Load's waits then
// leave out the names it returns here, held back by permits only.
type permitStore interface {
	Store
	LoadedPermits() map[string]Permits
}

// Permits are the held-back permits of a shared lock: each is taken
// until its own moment; Limit is the limit their holders stated.
type Permits struct {
	Limit uint16
	Until []time.Time
}

// Empty reports whether c changes nothing.
func (c Change) Empty() bool { return !c.Full && !c.AllSet && len(c.Locks) == 0 }
