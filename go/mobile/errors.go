package monolock

import (
	"context"
	"errors"
	"fmt"

	"github.com/monolock/monolock/go/client"
	"github.com/monolock/monolock/go/internal/spec"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// Error kinds: what ErrorKind returns, and Lock.LostKind for a lost lock.
// They match the kinds of the conformance driver protocol.
const (
	// KindValidation: refused before anything was sent (bad name, lease
	// out of range); ErrorCode is the code the server would have sent.
	KindValidation = "validation"
	// KindServer: the server answered with an ERROR; ErrorCode is its code,
	// or NoCode when the session ended at the ERROR's type byte.
	KindServer = "server"
	// KindBusy: TryAcquire found the lock held by another session.
	KindBusy = "busy"
	// KindTimeout: Acquire's timeout passed; for a lost lock, no
	// acknowledgement came within the client timeout.
	KindTimeout = "timeout"
	// KindCancelled: the Canceller passed to Acquire was cancelled.
	KindCancelled = "cancelled"
	// KindConnect: no server could be reached (TryAcquire).
	KindConnect = "connect"
	// KindIO: the connection failed or ended (a lost lock), or the server
	// broke the protocol.
	KindIO = "io"
	// KindConfig: a Config setting that is not a protocol value is invalid
	// (no server address, a bad certificate).
	KindConfig = "config"
)

// NoCode is what ErrorCode and Lock.LostCode return when no wire code applies.
const NoCode = -1

// failure is every error this package returns: the Go client's error with
// its kind and wire code worked out once. The binding turns it into a Java
// exception (or an NSError) whose message is Error(); handing that exception
// back to ErrorKind or ErrorCode reaches this value again.
type failure struct {
	kind string
	code int
	err  error
}

func (f *failure) Error() string {
	if f.code == NoCode {
		return fmt.Sprintf("%v [%s]", f.err, f.kind)
	}
	return fmt.Sprintf("%v [%s, code 0x%02x]", f.err, f.kind, f.code)
}

func (f *failure) Unwrap() error { return f.err }

func configError(err error) error { return &failure{kind: KindConfig, code: NoCode, err: err} }

// classify maps an error of the Go client to a failure. Order matters: an
// interrupted wait wraps both the context's error and the last attempt's.
func classify(err error) *failure {
	if err == nil {
		return nil
	}
	var f *failure
	if errors.As(err, &f) {
		return f
	}
	f = &failure{kind: KindIO, code: NoCode, err: err}
	var pe *protocol.Error
	var se *client.ServerError
	switch {
	case errors.As(err, &pe):
		f.kind, f.code = KindValidation, int(pe.Code)
	case errors.Is(err, client.ErrBusy):
		f.kind = KindBusy
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, client.ErrClientTimeout):
		f.kind = KindTimeout
	case errors.Is(err, context.Canceled):
		f.kind = KindCancelled
	case errors.As(err, &se):
		f.kind, f.code = KindServer, int(se.Code)
	case errors.Is(err, client.ErrServerEnded):
		f.kind = KindServer // an ERROR whose code never arrived: NoCode
	case errors.Is(err, client.ErrUnavailable):
		f.kind = KindConnect
	}
	return f
}

// ErrorKind returns the kind of an error returned by this package (one of
// the Kind constants), or "" for an error from elsewhere or nil.
func ErrorKind(err error) string {
	var f *failure
	if errors.As(err, &f) {
		return f.kind
	}
	return ""
}

// ErrorCode returns the protocol's wire code of an error returned by this
// package (a validation or server error), or NoCode.
func ErrorCode(err error) int {
	var f *failure
	if errors.As(err, &f) {
		return f.code
	}
	return NoCode
}

// ErrorTemporary reports whether the error's wire code is a temporary one
// (below 0x10: the server was shutting down, an administrator closed the
// session), so that trying again may succeed. False when there is no code.
func ErrorTemporary(err error) bool {
	code := ErrorCode(err)
	return code != NoCode && (&protocol.Error{Code: uint8(code)}).Temporary()
}

// leaseError refuses a LeaseMillis out of range, with the code the server
// would send (0x17) and the lease rule's message.
type leaseError struct{ ms int64 }

func (e leaseError) Error() string {
	return fmt.Sprintf("monolock: lease must be a whole number of milliseconds from %d ms to %d ms, got %d ms (0x%02x)", spec.LeaseMSMin, spec.LeaseMSMax, e.ms, protocol.ErrInvalidLease.Code)
}

func (e leaseError) Unwrap() error { return protocol.ErrInvalidLease }
