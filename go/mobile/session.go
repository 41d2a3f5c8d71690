package monolock

import (
	"context"
	"time"

	"github.com/monolock/monolock/go/client"
)

// Session carries many locks on one connection (protocol version 4): one
// heartbeat renews them all, and a TLS handshake is paid once. Its locks
// share its fate: when its connection ends, every lock it holds is lost
// (each LostListener hears it, before the close). Open it with
// Client.OpenSession; it is safe to use from several threads at once.
type Session struct {
	inner *client.Session
}

// OpenSession opens a session on the first server of the client's list
// that answers, with the client's lease. Errors: KindConnect (no server
// reached), KindServer (a server older than protocol version 4 refuses
// sessions, code 0x10, 0x11 or 0x13), KindTimeout.
func (c *Client) OpenSession(timeoutMillis int64) (*Session, error) {
	ctx, stop := withTimeout(context.Background(), timeoutMillis)
	defer stop()
	s, err := c.inner.Session(ctx)
	if err != nil {
		return nil, classify(err)
	}
	return &Session{inner: s}, nil
}

// Acquire takes the named lock on the session, waiting in the server's
// queue until it is granted, timeoutMillis passes (NoTimeout: no limit) or
// cancel (may be nil) is cancelled. Nothing is retried inside a session: a
// refusal fails at once (KindServer with its code), as does the end of
// the session.
func (s *Session) Acquire(name string, timeoutMillis int64, cancel *Canceller) (*Lock, error) {
	ctx := context.Background()
	if cancel != nil {
		ctx = cancel.context()
	}
	ctx, stop := withTimeout(ctx, timeoutMillis)
	defer stop()
	l, err := s.inner.Acquire(ctx, name)
	if err != nil {
		return nil, classify(err)
	}
	return newLock(l), nil
}

// TryAcquire takes the named lock on the session if it is free, else
// fails with KindBusy (the claim leaves the queue).
func (s *Session) TryAcquire(name string) (*Lock, error) {
	l, err := s.inner.TryAcquire(context.Background(), name)
	if err != nil {
		return nil, classify(err)
	}
	return newLock(l), nil
}

// Close releases every lock of the session (none is reported lost) and
// closes its connection.
func (s *Session) Close() { s.inner.Close() }

// withTimeout bounds ctx by timeoutMillis (NoTimeout: no bound).
func withTimeout(ctx context.Context, timeoutMillis int64) (context.Context, context.CancelFunc) {
	if timeoutMillis < 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, time.Duration(timeoutMillis)*time.Millisecond)
}
