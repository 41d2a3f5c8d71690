package client

import (
	"github.com/monolock/monolock/go/internal/spec"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// AcquireOption changes one Acquire or TryAcquire.
type AcquireOption func(*claimOptions) error

// claimOptions is what the AcquireOptions of one claim chose.
type claimOptions struct {
	shared bool
	limit  uint16 // 0: any number of shared holders
	value  []byte // nil: none
}

// Shared makes the claim shared: it holds the lock together with any other
// shared claims, and never while an exclusive claim holds it. Claims are
// granted strictly in arrival order, so a shared claim queued behind a
// waiting exclusive one waits for it: a stream of readers never starves a
// writer. Each shared holder gets its own fencing token, and is told of a
// loss as an exclusive holder is.
//
// A shared claim is sent as a protocol version 2 ACQUIRE; a server that
// speaks version 1 only refuses it with ErrSharedUnsupported. Exclusive
// claims are sent as version 1, which every server reads.
func Shared() AcquireOption {
	return func(o *claimOptions) error {
		o.shared = true
		return nil
	}
}

// Limit makes the claim a shared one of at most n holders at once: a
// semaphore of n permits, n from 1 to 65535. Every claimant of one name
// must state the same n while any shared claim is on it; the server
// refuses a different one with protocol.ErrLimitMismatch (0x1a).
func Limit(n int) AcquireOption {
	return func(o *claimOptions) error {
		if n < 1 || n > spec.SharedLimitMax {
			return limitError(n)
		}
		o.shared, o.limit = true, uint16(n)
		return nil
	}
}

// Value gives the claim a value that watchers and the admin API see while
// it waits and while it holds: who holds the lock and how to reach it (an
// address, a URL, a small JSON object), up to 1024 bytes
// (protocol.MaxValueLen). An empty value is none.
//
// A claim with a value is sent as a protocol version 3 ACQUIRE; a server
// that does not speak it refuses it with ErrValueUnsupported.
func Value(v []byte) AcquireOption {
	return func(o *claimOptions) error {
		if len(v) > protocol.MaxValueLen {
			return errorf("%w: %d bytes, at most %d", protocol.ErrValueTooLong, len(v), protocol.MaxValueLen)
		}
		o.value = v
		return nil
	}
}

func applyAcquireOptions(opts []AcquireOption) (claimOptions, error) {
	if len(opts) == 0 {
		// An exclusive claim, the common case: no options struct escapes
		// to the heap for the closures.
		return claimOptions{}, nil
	}
	var o claimOptions
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return o, err
		}
	}
	return o, nil
}

// frame is the ACQUIRE of the claim in the lowest version that says what
// it needs, so that it works with every server that can serve it: version
// 1 for an exclusive claim, 2 for a shared one, 3 for one with a value.
func (o claimOptions) frame(name string, leaseMS uint32) ([]byte, error) {
	mode := protocol.ModeExclusive
	if o.shared {
		mode = protocol.ModeShared
	}
	switch {
	case len(o.value) > 0:
		return protocol.AppendAcquireV3(nil, name, leaseMS, mode, o.limit, o.value)
	case o.shared:
		return protocol.AppendAcquireV2(nil, name, leaseMS, mode, o.limit)
	}
	return protocol.AppendAcquire(nil, name, leaseMS)
}
