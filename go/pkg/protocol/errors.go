package protocol

import (
	"fmt"

	"github.com/monolock/monolock/go/internal/spec"
)

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

// The canonical errors, one variable per code of spec/errors.json
// (ErrShuttingDown, ...), are generated into errors_gen.go.

// firstTerminalCode splits the code space: below it are server conditions
// that a reconnect may cure, from it on are errors in what the client sent.
const firstTerminalCode = spec.FirstTerminalCode

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
