package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/monolock/monolock/go/internal/spec"
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

	// ErrUnavailable wraps the failure to reach any server: connecting to
	// every address failed (TCP or the TLS handshake), no server spoke the
	// monolock protocol, or (TryAcquire) the server did not answer the
	// ACQUIRE.
	ErrUnavailable = errors.New("monolock: no server available")

	// ErrClientTimeout means no acknowledgement arrived within the client
	// timeout (0.8 x lease) of the last acknowledged send. The error a lock
	// or an attempt ends with also names the timeout and the lease.
	ErrClientTimeout = errors.New("monolock: no reply from the server within the client timeout (0.8 x lease)")

	// ErrProtocol means the server sent something the protocol does not allow
	// at that point (an unknown message type, an unsolicited reply, a changed
	// token). The connection is dropped.
	ErrProtocol = errors.New("monolock: protocol violation by the server")

	// ErrServerEnded means the server ended the session with an ERROR whose
	// code had not arrived when its type byte was read. An ERROR is always
	// the last message of a session, so the session ends at that byte; the
	// client does not wait for the rest. With no code there is no class:
	// a waiting Acquire queues again, as after a dropped connection; a held
	// lock is lost (Lock.Err wraps ErrLockLost and this).
	ErrServerEnded = errors.New("monolock: the server ended the session with an ERROR (its code did not arrive)")

	// ErrSharedUnsupported means the server answered a shared claim with
	// ERROR 0x10: it speaks protocol version 1 only, which has exclusive
	// locks and no shared locks or semaphores. The error also wraps the
	// *ServerError. It is terminal: the same server answers the same way.
	ErrSharedUnsupported = errors.New("monolock: the server does not support shared locks or semaphores (protocol version 2)")
)

// ErrValueUnsupported means the server answered a claim with a value
// (protocol version 3) with 0x10: it predates values. Terminal: no
// earlier version can carry one.
var ErrValueUnsupported = errors.New("monolock: the server does not support claims with a value (protocol version 3)")

// unsupportedError is ErrSharedUnsupported or ErrValueUnsupported from the
// server at addr: it answered the version the claim needs with 0x10.
type unsupportedError struct {
	addr    string
	feature *unsupported
	cause   error // the *ServerError 0x10
}

// unsupported is a feature of a protocol version, and what to do without it.
type unsupported struct {
	sentinel error
	what     string // "shared locks or semaphores"
	version  int
	instead  string // "use an exclusive lock"
}

var (
	sharedUnsupported = &unsupported{ErrSharedUnsupported, "shared locks or semaphores", 2, "use an exclusive lock"}
	valueUnsupported  = &unsupported{ErrValueUnsupported, "claims with a value", 3, "claim without a value"}
)

func (e *unsupportedError) Error() string {
	return fmt.Sprintf("monolock: server %s does not support %s (it answered a protocol version %d ACQUIRE with 0x10 unsupported protocol version); %s, or upgrade the server",
		e.addr, e.feature.what, e.feature.version, e.feature.instead)
}

func (e *unsupportedError) Unwrap() []error { return []error{e.feature.sentinel, e.cause} }

// ServerError is an ERROR frame received from the server. The code is the
// contract; the reason is free text for humans and may be empty.
type ServerError struct {
	Code   uint8
	Reason string
}

// Error is the server's reason (the code's canonical text when the
// reason is empty) and the code, in the words of every client:
// "monolock: not authorized for lock: no ACL rule lets anonymous take it
// (0x18)". The reason is not prefixed with the code's text: the server's
// reasons already start with it where it helps, and a second copy said it
// twice.
func (e *ServerError) Error() string {
	text := e.Reason
	switch {
	case e.Code == protocol.ErrNotActive.Code && text != "":
		// The reason is the active server's address.
		text = protocol.ErrCodeName(e.Code) + "; the active server is " + text
	case text == "":
		text = "unknown error"
		if known := protocol.CodeErr(e.Code); known != nil {
			text = protocol.ErrCodeName(e.Code)
		}
	}
	return fmt.Sprintf("monolock: %s (0x%02x)", text, e.Code)
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

// clientTimeoutError is ErrClientTimeout for one claim: its message names the
// timeout and the lease, in the words of every client ("no reply from the
// server within 1600 ms (0.8 x lease of 2000 ms)"), so that an operator
// sees which setting to change.
type clientTimeoutError struct{ leaseMS uint32 }

func (e *clientTimeoutError) Error() string {
	return fmt.Sprintf("monolock: no reply from the server within %s ms (0.8 x lease of %d ms)", clientTimeoutMS(e.leaseMS), e.leaseMS)
}

func (e *clientTimeoutError) Unwrap() error { return ErrClientTimeout }

// clientTimeoutMS is 0.8 x lease in milliseconds, exactly: a whole number
// or one decimal (lease 1001 ms gives "800.8"), never a float's rounding.
func clientTimeoutMS(leaseMS uint32) string {
	tenths := uint64(leaseMS) * 8
	if tenths%10 == 0 {
		return strconv.FormatUint(tenths/10, 10)
	}
	return fmt.Sprintf("%d.%d", tenths/10, tenths%10)
}

// timeoutError is an acquisition whose context deadline passed: it names
// the lock, and the last attempt's failure if there was one, in the words
// of every client (spec/vectors/messages.json): "monolock: timed out
// waiting for the lock "jobs/nightly" (last attempt: server shutting down
// (0x01))". It wraps context.DeadlineExceeded and the last failure.
type timeoutError struct {
	name string
	last error
}

// busyError is ErrBusy for one claim: its message says what kept it out
// in the words of every client (spec/vectors/messages.json, busy), such
// as "monolock: all 2 permits of "pool/gpu" are taken".
type busyError struct {
	name   string
	shared bool
	limit  uint16
}

func (e *busyError) Error() string {
	q := strconv.Quote(e.name)
	switch {
	case !e.shared:
		return prefix + "lock " + q + " is held by another session"
	case e.limit == 1:
		return prefix + "the 1 permit of " + q + " is taken"
	case e.limit > 1:
		return prefix + "all " + strconv.Itoa(int(e.limit)) + " permits of " + q + " are taken"
	}
	return prefix + "lock " + q + " is held exclusively by another session"
}

func (e *busyError) Is(target error) bool { return target == ErrBusy }

func (e *timeoutError) Error() string {
	msg := prefix + "timed out waiting for the lock " + strconv.Quote(e.name)
	if e.last != nil {
		msg += " (last attempt: " + strings.TrimPrefix(e.last.Error(), prefix) + ")"
	}
	return msg
}

func (e *timeoutError) Unwrap() []error {
	if e.last == nil {
		return []error{context.DeadlineExceeded}
	}
	return []error{context.DeadlineExceeded, e.last}
}

// lostError wraps ErrLockLost together with its cause.
func lostError(cause error) error {
	return errorf("%w: %w", ErrLockLost, cause)
}

// prefix starts every message of this package, once.
const prefix = "monolock: "

// errorf is fmt.Errorf for this package's messages: it puts the prefix in
// front of format, and the error arguments drop theirs, so that a wrapped
// cause does not repeat it ("monolock: lock lost: closed by administrator (0x02)").
// The arguments are still wrapped: errors.Is and errors.As see them.
func errorf(format string, args ...any) error {
	for i, a := range args {
		if err, ok := a.(error); ok {
			args[i] = unprefixed{err}
		}
	}
	return fmt.Errorf(prefix+format, args...)
}

// unprefixed is an error whose text goes without the package prefix.
type unprefixed struct{ err error }

func (u unprefixed) Error() string { return strings.TrimPrefix(u.err.Error(), prefix) }
func (u unprefixed) Unwrap() error { return u.err }

// attemptErrors say why each server was not reached (each names its
// server), in one line.
type attemptErrors []error

func (a attemptErrors) Error() string {
	texts := make([]string, len(a))
	for i, err := range a {
		texts[i] = strings.TrimPrefix(err.Error(), prefix)
	}
	return strings.Join(texts, "; ")
}

func (a attemptErrors) Unwrap() []error { return a }

// connectError is a failure to connect to one server: TCP, or the TLS
// handshake. Its text names the server; it wraps the network's error.
type connectError struct {
	addr   string
	err    error
	tls    bool     // the TLS handshake failed
	notTLS bool     // ... because what the server answered is not TLS
	cert   certSide // ... because a certificate was refused
}

func (e *connectError) Error() string {
	if !e.tls {
		cause := e.err
		var op *net.OpError
		if errors.As(cause, &op) && op.Err != nil {
			cause = op.Err // its text would repeat the address
		}
		return fmt.Sprintf("monolock: cannot connect to %s: %v", e.addr, cause)
	}
	switch {
	case e.notTLS:
		return fmt.Sprintf("monolock: TLS handshake with %s failed; the server may not speak TLS (%v)", e.addr, e.err)
	case e.cert == serverCertRefused:
		return fmt.Sprintf("monolock: TLS handshake with %s failed: %v (the server's certificate is not trusted: check the CA file and the server name)", e.addr, e.err)
	case e.cert == clientCertRefused:
		return fmt.Sprintf("monolock: TLS handshake with %s failed: %v (the server refused this client's certificate: give a client certificate that its CA signs)", e.addr, e.err)
	}
	return fmt.Sprintf("monolock: TLS handshake with %s failed: %v", e.addr, e.err)
}

func (e *connectError) Unwrap() error { return e.err }

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

// Temporary is false: the address is wrong, and that server answers the same
// way next time (spec/vectors/temporary.json). The acquisition still moves
// on to the other servers of the list.
func (e *notMonolockError) Temporary() bool { return false }

// inputError refuses a name or a lease before anything is sent. It is the
// canonical protocol error of the code the server would have sent
// (errors.Is, and errors.As with *protocol.Error), with a message that says
// what is wrong with the value given.
type inputError struct {
	canon  *protocol.Error
	detail string // the canonical text with the value's particulars
}

func (e *inputError) Error() string {
	return fmt.Sprintf("monolock: %s (0x%02x)", e.detail, e.canon.Code)
}

func (e *inputError) Unwrap() error { return e.canon }

// leaseError refuses lease d (spec/constants.json, client_defaults.lease_rule).
func leaseError(d time.Duration) error {
	return &inputError{canon: protocol.ErrInvalidLease, detail: fmt.Sprintf(
		"lease must be a whole number of milliseconds from %d ms to %d ms, got %v", spec.LeaseMSMin, spec.LeaseMSMax, d)}
}

// limitError refuses a semaphore's limit n (spec/constants.json,
// client_defaults.limit_rule).
func limitError(n int) error {
	return &inputError{canon: protocol.ErrInvalidMode, detail: fmt.Sprintf(
		"a semaphore's limit must be a whole number from 1 to %d permits, got %d", spec.SharedLimitMax, n)}
}

// nameTooLongError gives the length and the limit, never the name, which
// would fill the screen.
func nameTooLongError(name string) error {
	return &inputError{canon: protocol.ErrNameTooLong, detail: fmt.Sprintf(
		"lock name too long (%d bytes, the limit is %d)", len(name), protocol.MaxNameLen)}
}
