// Package listing holds the one type of a lock listing, from the server
// that builds it from its lock table and sessions to the admin API that
// writes it as JSON (GET /v1/locks, docs/operating.md) and the commands
// that read it (monolock locks, kick --lock).
package listing

import (
	"encoding/hex"
	"time"
	"unicode/utf8"
)

// Session is one session in a lock listing.
type Session struct {
	ID       uint64    `json:"session"`
	Remote   string    `json:"remote"`
	Identity string    `json:"identity"`
	Token    uint64    `json:"token,omitempty"`
	LeaseMS  int64     `json:"lease_ms"`
	Since    time.Time `json:"since"`
	Mode     string    `json:"mode"` // ModeExclusive or ModeShared
	// HeldBackUntil: a held-back holder (see Lock.HeldBackHolders) is
	// kept until then; absent for a live session.
	HeldBackUntil *time.Time `json:"held_back_until,omitempty"`
	// Value is the claim's value (protocol version 3) when it is UTF-8
	// text; ValueHex, when it is not. Both are absent for none.
	Value    string `json:"value,omitempty"`
	ValueHex string `json:"value_hex,omitempty"`
	// Arrival orders a lock's waiters (absent for holders, which the
	// token orders): a page of them goes on after the last one's.
	Arrival uint64 `json:"arrival,omitempty"`
}

// Modes of a claim and of a held lock, as listings name them.
const (
	ModeExclusive = "exclusive"
	ModeShared    = "shared"
)

// Lock is one lock in a listing.
type Lock struct {
	Name string `json:"name"`
	// Mode is how the holders hold it; absent while nobody does.
	Mode string `json:"mode,omitempty"`
	// Limit is the limit of the shared sessions on the lock (0: none);
	// absent when there are none.
	Limit *uint16 `json:"limit,omitempty"`
	// Holder is the first of Holders, null when there are none.
	Holder  *Session  `json:"holder"`
	Holders []Session `json:"holders"` // at most locktable.MaxListed; holders_total counts them all
	// HoldersTotal and WaitersTotal count every live holder and waiter,
	// of which the lists name at most locktable.MaxListed each.
	HoldersTotal int `json:"holders_total"`
	WaitersTotal int `json:"waiters_total"`
	// HeldBack counts holders that went silent, whose places are kept for
	// the lock delay.
	HeldBack int `json:"held_back,omitempty"`
	// HeldBackHolders are those holders: their sessions are gone (reset,
	// or silent under the lock delay), their claims keep their places
	// until held_back_until; a kick ends one only with force.
	HeldBackHolders []Session `json:"held_back_holders,omitempty"`
	Waiters         []Session `json:"waiters"`
	Blocked         bool      `json:"blocked,omitempty"` // nobody is granted it yet: an exclusive holder went silent (lock delay), or a restart waits out a holder of the previous run
	// Watchers counts the live watches of the name (protocol version 3).
	Watchers int `json:"watchers,omitempty"`
}

// The kinds of a lock's sessions, as a page of them names them (the
// fields of Lock that list them).
const (
	KindHolders         = "holders"
	KindHeldBackHolders = "held_back_holders"
	KindWaiters         = "waiters"
)

// SessionPage is one page of one kind of a lock's sessions (GET
// /v1/lock/sessions): holders and held-back holders in token order,
// waiters in queue order.
type SessionPage struct {
	Lock     string    `json:"lock"`
	Kind     string    `json:"kind"`
	Sessions []Session `json:"sessions"`
	// Next is set when more follow: the token (holders) or arrival
	// (waiters) of the last session of this page, to pass as after.
	Next uint64 `json:"next,omitempty"`
}

// SetValue sets Value, or ValueHex for a value that is not UTF-8.
func (s *Session) SetValue(v []byte) {
	if utf8.Valid(v) {
		s.Value, s.ValueHex = string(v), ""
		return
	}
	s.Value, s.ValueHex = "", hex.EncodeToString(v)
}
