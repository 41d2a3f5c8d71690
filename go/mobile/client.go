package monolock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/monolock/monolock/go/client"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// NoTimeout, as Acquire's timeout, waits for as long as it takes.
const NoTimeout = -1

// Client takes locks. It holds no connection itself (every Lock has its
// own) and is safe to use from several threads at once.
type Client struct {
	inner *client.Client
}

// NewClient returns a client with the settings of cfg (nil: the defaults).
// In Java and Kotlin it is also the constructor new Client(cfg).
func NewClient(cfg *Config) (*Client, error) {
	if cfg == nil {
		cfg = NewConfig()
	}
	opts, err := cfg.options()
	if err != nil {
		return nil, classify(err)
	}
	c, err := client.New(opts...)
	if err != nil {
		var pe *protocol.Error
		if !errors.As(err, &pe) {
			return nil, configError(err)
		}
		return nil, classify(err)
	}
	return &Client{inner: c}, nil
}

// Acquire takes the named lock, waiting in the server's queue until it is
// granted, timeoutMillis passes (NoTimeout: no limit; 0: give up at once),
// or cancel (may be nil) is cancelled. While it waits it re-queues after
// temporary server errors and lost connections. It blocks the calling
// thread.
//
// Errors: KindValidation (bad name), KindServer (a terminal server error),
// KindTimeout, KindCancelled.
func (c *Client) Acquire(name string, timeoutMillis int64, cancel *Canceller) (*Lock, error) {
	return c.acquire(name, timeoutMillis, cancel)
}

// AcquireShared is Acquire for a shared claim: it holds the lock together
// with other shared claims, never while an exclusive one holds it. Claims
// are granted in arrival order, so it waits behind an exclusive claim
// queued before it. A server without shared locks (protocol version 1
// only) fails it with KindServer, code 0x10.
func (c *Client) AcquireShared(name string, timeoutMillis int64, cancel *Canceller) (*Lock, error) {
	return c.acquire(name, timeoutMillis, cancel, client.Shared())
}

// AcquireSemaphore is AcquireShared with at most permits shared holders at
// once (1 to 65535; another number is KindValidation, code 0x19). Every
// claimant of the name must give the same permits (else KindServer, code
// 0x1a).
func (c *Client) AcquireSemaphore(name string, permits int, timeoutMillis int64, cancel *Canceller) (*Lock, error) {
	return c.acquire(name, timeoutMillis, cancel, client.Limit(permits))
}

func (c *Client) acquire(name string, timeoutMillis int64, cancel *Canceller, opts ...client.AcquireOption) (*Lock, error) {
	ctx := context.Background()
	if cancel != nil {
		ctx = cancel.context()
	}
	if timeoutMillis >= 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeout(ctx, time.Duration(timeoutMillis)*time.Millisecond)
		defer stop()
	}
	l, err := c.inner.Acquire(ctx, name, opts...)
	if err != nil {
		return nil, classify(err)
	}
	return newLock(l), nil
}

// TryAcquire takes the named lock if it is free, and fails with KindBusy at
// once if another session holds it. It makes a single attempt: a server
// error is KindServer, an unreachable server KindConnect.
func (c *Client) TryAcquire(name string) (*Lock, error) {
	return c.tryAcquire(name)
}

// TryAcquireShared is TryAcquire for a shared claim (see AcquireShared):
// KindBusy when it does not fit at once.
func (c *Client) TryAcquireShared(name string) (*Lock, error) {
	return c.tryAcquire(name, client.Shared())
}

// TryAcquireSemaphore is TryAcquire for one of permits shared holders (see
// AcquireSemaphore): KindBusy when every permit is taken.
func (c *Client) TryAcquireSemaphore(name string, permits int) (*Lock, error) {
	return c.tryAcquire(name, client.Limit(permits))
}

func (c *Client) tryAcquire(name string, opts ...client.AcquireOption) (*Lock, error) {
	l, err := c.inner.TryAcquire(context.Background(), name, opts...)
	if err != nil {
		return nil, classify(err)
	}
	return newLock(l), nil
}

// Canceller cancels the Acquire calls it was passed to, from any thread:
// they return at once with KindCancelled and leave the server's queue.
// It is single-use: once cancelled, every Acquire given it fails at once.
// In Java and Kotlin: new Canceller().
type Canceller struct {
	once   sync.Once
	ctx    context.Context
	cancel context.CancelFunc
}

// NewCanceller returns a Canceller that has not been cancelled.
func NewCanceller() *Canceller { return &Canceller{} }

func (c *Canceller) context() context.Context {
	c.once.Do(func() { c.ctx, c.cancel = context.WithCancel(context.Background()) })
	return c.ctx
}

// Cancel cancels every Acquire given this Canceller, current and future.
func (c *Canceller) Cancel() {
	c.context()
	c.cancel()
}

// IsCancelled reports whether Cancel has been called.
func (c *Canceller) IsCancelled() bool { return c.context().Err() != nil }
