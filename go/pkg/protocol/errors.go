package protocol

import "fmt"

// Error is a protocol error: a stable wire code plus its canonical text. The
// code is what clients branch on, the text is for humans.
type Error struct {
	Code uint8
	text string
}

func newError(code uint8, text string) *Error {
	e := &Error{Code: code, text: text}
	errorsByCode[code] = e
	return e
}

// errorsByCode is filled by newError as the canonical variables initialise.
var errorsByCode = map[uint8]*Error{}

// Canonical protocol errors, one wire code each. AppendAcquire and
// ReadAcquireBody return the name and lease ones when validating input; the
// server sends the code and text of an ERROR message from the same values, so
// a client can match a received code back to one of them with CodeErr.
var (
	ErrShuttingDown       = newError(0x01, "server shutting down")
	ErrAdminClosed        = newError(0x02, "closed by administrator")
	ErrUnsupportedVersion = newError(0x10, "unsupported protocol version")
	ErrExpectedAcquire    = newError(0x11, "first message must be ACQUIRE")
	ErrDuplicateAcquire   = newError(0x12, "duplicate ACQUIRE")
	ErrUnknownMessage     = newError(0x13, "unknown message type")
	ErrEmptyName          = newError(0x14, "empty lock name")
	ErrNameTooLong        = newError(0x15, "lock name too long")
	ErrNameNotUTF8        = newError(0x16, "lock name is not valid UTF-8")
	ErrInvalidLease       = newError(0x17, "lease must be positive")
	ErrNotAuthorized      = newError(0x18, "not authorized for lock")
)

// firstTerminalCode splits the code space: below it are server conditions
// that a reconnect may cure, from it on are errors in what the client sent.
const firstTerminalCode = 0x10

// CodeErr returns the canonical Error for a wire code, or nil for a code this
// version of the protocol does not know.
func CodeErr(c uint8) *Error {
	return errorsByCode[c]
}

// ErrCodeName returns a human readable name for an ERROR code.
func ErrCodeName(c uint8) string {
	if e := CodeErr(c); e != nil {
		return e.text
	}
	return fmt.Sprintf("unknown error 0x%02x", c)
}

func (e *Error) Error() string {
	return fmt.Sprintf("monolock: %s (0x%02x)", e.text, e.Code)
}

// Temporary reports whether reconnecting may help. Codes below 0x10 are
// server conditions; everything above is a client error and terminal, since
// the same bytes will fail the same way. The split is a range so that a
// client classifies codes it does not know yet the same way.
func (e *Error) Temporary() bool {
	return e.Code < firstTerminalCode
}
