// Package pipe is the conformance pipe protocol of docs/writing-a-client.md
// in Go: JSON commands on a driver's stdin, JSON events on its stdout, one
// object per line. Both ends use it: the Go driver and the mutants' base
// client read commands and write events (driver_end.go); the conformance
// runner, the chaos harness and the benchmark write commands and read
// events (runner_end.go). The Python, Node, Rust and Java drivers speak the
// same lines, so the field names and what is omitted are the wire contract.
//
// It is test-harness code, not client API, so it is in testkit; it is in
// the go module because the conformance module depends on this one and
// never the other way round.
package pipe

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
)

// Command names.
const (
	Acquire = "acquire"
	Release = "release"
	Cancel  = "cancel"
	Quit    = "quit"
	// Proclaim replaces the value of a held claim (id, value); Observe
	// follows a name's leader (id, servers, name, lease_ms, tls), until
	// release of its id. Both need the capability "election".
	Proclaim = "proclaim"
	Observe  = "observe"
	// Session opens a session of protocol version 4 (id, servers,
	// lease_ms, tls): an acquire whose session names it goes on it, and
	// release of its id closes it. Needs the capability "sessions".
	Session = "session"
)

// Acquire modes.
const (
	ModeWait = "wait"
	ModeTry  = "try"
)

// Command is one line from the runner. Only acquire carries more than cmd
// and id; fields left nil or empty are omitted, which every driver reads as
// absent ("the client's default"). lease_ms is a pointer because 0 is a
// value scenarios send on purpose (the client must refuse it).
type Command struct {
	Cmd              string   `json:"cmd"`
	ID               string   `json:"id,omitempty"`
	Servers          []string `json:"servers,omitempty"`
	Name             *string  `json:"name,omitempty"`
	NameHex          *string  `json:"name_hex,omitempty"` // raw bytes in hex, instead of name
	LeaseMS          *uint64  `json:"lease_ms,omitempty"`
	Mode             string   `json:"mode,omitempty"` // ModeWait or ModeTry
	TimeoutMS        *int64   `json:"timeout_ms,omitempty"`
	ConnectTimeoutMS *int64   `json:"connect_timeout_ms,omitempty"`
	TLS              *TLS     `json:"tls,omitempty"`
	// Shared asks for a shared claim (protocol version 2); Limit, with
	// Shared, for one of at most that many shared holders (a semaphore).
	// Both are absent for an exclusive claim.
	Shared bool `json:"shared,omitempty"`
	Limit  *int `json:"limit,omitempty"`
	// Value is the claim's value (acquire: a campaign, protocol version
	// 3) or the new value (proclaim); absent for none.
	Value *string `json:"value,omitempty"`
	// Session (acquire) is the id of the session the claim goes on;
	// absent: a connection of its own.
	Session string `json:"session,omitempty"`
}

// TLS is the tls object of an acquire command: PEM files and the name the
// server's certificate must carry (nil: the host of the address).
type TLS struct {
	CAFile     string  `json:"ca_file"`
	CertFile   string  `json:"cert_file,omitempty"`
	KeyFile    string  `json:"key_file,omitempty"`
	ServerName *string `json:"server_name,omitempty"`
}

// ErrNoName is LockName's error for a command with neither name nor
// name_hex.
var ErrNoName = errors.New("no name")

// LockName returns the name to lock: name_hex decoded when present (any
// bytes, invalid UTF-8 included), else name.
func (c Command) LockName() (string, error) {
	if c.NameHex != nil {
		b, err := hex.DecodeString(*c.NameHex)
		if err != nil {
			return "", fmt.Errorf("name_hex: %w", err)
		}
		return string(b), nil
	}
	if c.Name == nil {
		return "", ErrNoName
	}
	return *c.Name, nil
}

// Event names.
const (
	Ready       = "ready"
	Waiting     = "waiting"
	Acquired    = "acquired"
	Error       = "error"
	Lost        = "lost"
	Released    = "released"
	DriverError = "driver_error"
	// Proclaimed: the server acknowledged a proclaim (id). Observed: what
	// an observe sees of its name's leader changed (id, state, and for a
	// leader or a held-back one token, value; candidates).
	Proclaimed = "proclaimed"
	Observed   = "observed"
	// Opened: a session command's session is open (its SESSION_OK came).
	Opened = "opened"
)

// The states of an observed event.
const (
	StateLeader   = "leader"
	StateNone     = "none"
	StateHeldBack = "held_back"
	StateUnknown  = "unknown"
)

// Event is one line from a driver. Which fields an event carries depends
// on its name:
//
//	ready         client, capabilities
//	waiting       id
//	acquired      id, token, valid_ms
//	error, lost   id, kind, code, temporary, message
//	released      id
//	proclaimed    id
//	observed      id, state, token, value, candidates
//	opened        id
//	driver_error  message
//
// Any event may carry t_ms, the driver's own clock, for diagnostics.
type Event struct {
	Name         string   `json:"event"`
	ID           string   `json:"id,omitempty"`
	Client       string   `json:"client,omitempty"`
	Capabilities []string `json:"capabilities,omitzero"` // a ready without any still says []
	Token        string   `json:"token,omitempty"`       // decimal uint64: JSON numbers lose bits above 2^53
	ValidMS      *float64 `json:"valid_ms,omitempty"`
	Kind         string   `json:"kind,omitempty"`
	Code         *int     `json:"code,omitempty"` // the wire code; nil: none (null on error and lost)
	Temporary    *bool    `json:"temporary,omitempty"`
	Message      string   `json:"message,omitempty"`
	State        string   `json:"state,omitempty"`
	Value        *string  `json:"value,omitempty"`
	Candidates   *int     `json:"candidates,omitempty"`
	TMS          *float64 `json:"t_ms,omitempty"`
}

// MarshalJSON writes code and temporary on error and lost events even when
// there is no code, as null: the protocol says so and the runner checks
// that both are null together. Other events leave them out.
func (e Event) MarshalJSON() ([]byte, error) {
	type fields Event // without this method
	if e.Name != Error && e.Name != Lost {
		return json.Marshal(fields(e))
	}
	return json.Marshal(struct {
		fields
		Code      *int  `json:"code"`
		Temporary *bool `json:"temporary"`
	}{fields(e), e.Code, e.Temporary})
}

// Failure reports whether the event ends a claim with a fault: error, lost
// or driver_error.
func (e Event) Failure() bool {
	return e.Name == Error || e.Name == Lost || e.Name == DriverError
}
