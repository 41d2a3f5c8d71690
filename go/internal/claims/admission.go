package claims

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// Request is what a decoded ACQUIRE asks for, and the connection it came
// on: the ACL looks at its peer's identity. The claim layer never reads
// from or writes to it.
type Request struct {
	Name   string
	Lease  time.Duration
	Shared bool
	Limit  uint16
	Value  []byte // protocol version 3; nil for none
	Conn   net.Conn
}

// admissionInputs is everything else the admission of a claim reads, each
// found by its caller: the server's policy, the client's identity's
// verdict, and the lock table's state of the name. Nothing in it is read
// from a socket or a clock by the decision itself.
type admissionInputs struct {
	maxLease time.Duration // --max-lease; 0: no limit
	// active: this server may acknowledge claims (it is not a passive
	// server of an HA cell); leader names the active one when it is not.
	active bool
	leader string
	// acl is the ACL's refusal of the client for this name, nil when it
	// may take it (or there is no ACL).
	acl error
	// limit is the limit that the name's shared claims agreed on, when
	// bound (there are any).
	limit uint16
	bound bool
}

// admission decides whether a claim may be acknowledged: nil to admit it
// (then the lease record takes its lease, and the lock table its place),
// else the ERROR that refuses it. The checks come in the protocol's
// order after those of the frame itself (docs/protocol.md): the server's
// maximum lease, the active server, the ACL, the limit agreement.
func admission(req Request, in admissionInputs) *WireError {
	switch {
	case in.maxLease > 0 && req.Lease > in.maxLease:
		// The protocol has no upper bound; an operator may set one, so
		// that a holder that vanishes without a FIN cannot keep a lock
		// for days.
		return &WireError{protocol.ErrInvalidLease, fmt.Sprintf("lease %d ms is above this server's maximum of %d ms",
			req.Lease.Milliseconds(), in.maxLease.Milliseconds())}
	case !in.active:
		return notActive(in.leader) // a passive server of an HA cell: the client moves on, to the leader if it knows it
	case in.acl != nil:
		return &WireError{protocol.ErrNotAuthorized, protocol.ErrCodeName(protocol.ErrNotAuthorized.Code) + ": " + in.acl.Error()}
	case req.Shared && in.bound && in.limit != req.Limit:
		return limitMismatchError(req.Limit, in.limit)
	}
	return nil
}

// notActive is the ERROR 0x03 of a passive server. Its reason is exactly
// the active server's advertised address, HOST:PORT, when it is known (a
// client whose list has that address tries it next), else the code's
// canonical text (spec/errors.json).
func notActive(leader string) *WireError {
	if leader == "" {
		return &WireError{Code: protocol.ErrNotActive}
	}
	return &WireError{Code: protocol.ErrNotActive, Reason: leader}
}

// limitMismatchError is the ERROR 0x1a for a shared claim with limit mine
// on a name whose shared claims agreed on theirs; it says both.
func limitMismatchError(mine, theirs uint16) *WireError {
	return &WireError{protocol.ErrLimitMismatch, fmt.Sprintf("limit %s differs from the limit %s of the shared sessions on this lock",
		limitText(mine), limitText(theirs))}
}

// limitText says a shared claim's limit, 0 being none.
func limitText(limit uint16) string {
	if limit == 0 {
		return "0 (none)"
	}
	return strconv.Itoa(int(limit))
}

// CheckSessionLease refuses a session (protocol version 4) whose lease is
// above the server's maximum, as admission refuses such a claim: every
// claim of the session shares that lease.
func (r *Registry) CheckSessionLease(lease time.Duration) error {
	if refused := admission(Request{Lease: lease}, admissionInputs{maxLease: r.maxLease, active: true}); refused != nil {
		return refused
	}
	return nil
}
