package client

import (
	"errors"
	"fmt"
	"strings"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// Sentinel errors. Test for them with errors.Is: the errors returned by this
// package wrap them together with their cause.
var (
	// ErrBusy is returned by TryAcquire when another session holds the lock.
	ErrBusy = errors.New("monolock: lock is held by another session")

	// ErrLockLost is wrapped by Lock.Err once a held lock is lost. The same
	// error also wraps the cause: a *ServerError, ErrClientTimeout, or the
	// connection's I/O error.
	ErrLockLost = errors.New("monolock: lock lost")

	// ErrReleased is Lock.Err after Lock.Release.
	ErrReleased = errors.New("monolock: lock released")

	// ErrUnavailable wraps the failure to reach any server: dialing every
	// address failed, or (TryAcquire) the server did not answer the ACQUIRE.
	ErrUnavailable = errors.New("monolock: no server available")

	// ErrClientTimeout means no acknowledgement arrived within the client
	// timeout (0.8 x lease) of the last acknowledged send.
	ErrClientTimeout = errors.New("monolock: no acknowledgement within the client timeout")

	// ErrProtocol means the server sent something the protocol does not allow
	// at that point (an unknown message type, an unsolicited reply, a changed
	// token). The connection is dropped.
	ErrProtocol = errors.New("monolock: protocol violation by the server")
)

// ServerError is an ERROR frame received from the server. The code is the
// contract; the reason is free text for humans and may be empty.
type ServerError struct {
	Code   uint8
	Reason string
}

func (e *ServerError) Error() string {
	name := protocol.ErrCodeName(e.Code)
	if e.Reason == "" || e.Reason == name {
		return fmt.Sprintf("monolock: server error 0x%02x: %s", e.Code, name)
	}
	return fmt.Sprintf("monolock: server error 0x%02x: %s: %s", e.Code, name, e.Reason)
}

// Temporary reports whether trying again may help: codes below 0x10 are
// server conditions (shutting down, closed by an administrator). The rule is
// a range, so codes this version does not know are classified too.
func (e *ServerError) Temporary() bool {
	return (&protocol.Error{Code: e.Code}).Temporary()
}

// Is makes errors.Is(err, protocol.ErrNotAuthorized) (or any canonical
// protocol error) true for a ServerError of the same code.
func (e *ServerError) Is(target error) bool {
	switch t := target.(type) {
	case *protocol.Error:
		return t != nil && t.Code == e.Code
	case *ServerError:
		return t != nil && t.Code == e.Code
	}
	return false
}

// lostError wraps ErrLockLost together with its cause.
func lostError(cause error) error {
	return fmt.Errorf("%w: %w", ErrLockLost, cause)
}

// notMonolockError is a server whose first bytes start no server message:
// an HTTP port (such as the admin port), or a TLS server spoken to in
// plaintext. It is a protocol violation (errors.Is ErrProtocol), and the
// acquisition does not ask that server again.
type notMonolockError struct {
	addr string
	sent string // the first bytes it sent, quoted
}

func (e *notMonolockError) Error() string {
	msg := fmt.Sprintf("monolock: %s does not speak the monolock protocol (it sent \"%s\")", e.addr, e.sent)
	if strings.HasPrefix(e.sent, "HTTP/") {
		msg += "; is this the admin port?"
	}
	return msg
}

func (e *notMonolockError) Unwrap() error { return ErrProtocol }
