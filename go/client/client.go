package client

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"time"

	"github.com/monolock/monolock/go/client/internal/retry"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// Client makes lock claims against a monolock server. It holds no
// connection of its own (each Lock has one) and is safe for concurrent use.
type Client struct {
	cfg config
}

// New returns a Client configured by opts. It fails on an invalid option,
// for example protocol.ErrInvalidLease for a lease the server would refuse.
func New(opts ...Option) (*Client, error) {
	cfg := config{
		servers:     []string{DefaultServer},
		dialTimeout: DefaultDialTimeout,
	}
	if err := WithLease(DefaultLease)(&cfg); err != nil {
		return nil, err
	}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.logger == nil {
		cfg.logger = slog.New(slog.DiscardHandler)
	}
	return &Client{cfg: cfg}, nil
}

// Lease returns the lease the client asks for.
func (c *Client) Lease() time.Duration { return c.cfg.lease }

// Acquire takes the named lock, waiting in the server's queue until it is
// granted or ctx is done. Temporary server errors and connection failures
// while waiting lead to a new place in the queue after a backoff, for as long
// as ctx allows. When ctx ends first, the error wraps ctx.Err(); if the
// attempt that ctx ended had not reached a monolock server, it also wraps
// ErrUnavailable with why each server could not be reached, so that
// errors.Is(err, ErrUnavailable) tells "could not reach the server" from
// "the lock stayed busy". A server that does not speak the monolock
// protocol (a wrong port) is not asked again; when no other server is left,
// Acquire returns at once with an error wrapping ErrUnavailable and
// ErrProtocol. Terminal server errors (*ServerError) are returned at once.
//
// ctx only bounds the wait: once granted, the lock is held until Release or
// until it is lost, whatever happens to ctx.
//
// With Shared or Limit among opts the claim is shared (see Shared).
func (c *Client) Acquire(ctx context.Context, name string, opts ...AcquireOption) (*Lock, error) {
	return c.acquire(ctx, name, false, opts)
}

// TryAcquire takes the named lock if it is free and returns ErrBusy at once
// if another session holds it. It makes one pass over the servers: a server
// error is returned as *ServerError (temporary or not), and when no server
// can be reached, answers, or speaks the monolock protocol, the error wraps
// ErrUnavailable. Before it returns ErrBusy it hands its place in the
// queue back and waits (one round trip) for the server to drop it, so the
// holder's release can never promote this abandoned claim.
//
// A shared TryAcquire (Shared, Limit) returns ErrBusy when the claim does
// not fit at once, or would have to wait behind a claim queued before it.
func (c *Client) TryAcquire(ctx context.Context, name string, opts ...AcquireOption) (*Lock, error) {
	return c.acquire(ctx, name, true, opts)
}

func (c *Client) acquire(ctx context.Context, name string, try bool, opts []AcquireOption) (*Lock, error) {
	// Validation first: a refused name never costs a connection.
	claimOpts, err := applyAcquireOptions(opts)
	if err != nil {
		return nil, err
	}
	frame, err := claimOpts.frame(name, c.cfg.leaseMS)
	if errors.Is(err, protocol.ErrNameTooLong) {
		return nil, nameTooLongError(name)
	}
	if err != nil {
		return nil, err
	}
	var (
		log     *slog.Logger // built on the first retry: most claims never log
		plan    = retry.New(len(c.cfg.servers), try)
		lastErr error   // the last failure, for the caller
		missed  []error // per server: why it was not reached (or is not monolock) since one answered
	)
	for {
		step := plan.Next()
		switch step.Kind {
		case retry.GiveUp:
			return nil, lastErr
		case retry.Sleep:
			if log == nil {
				log = c.cfg.logger.With("lock", name)
			}
			log.Warn("monolock: acquisition failed, retrying", "err", lastErr, "retry_in", step.Delay)
			if !sleep(ctx, step.Delay) {
				return nil, interrupted(name, ctx, lastErr)
			}
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, interrupted(name, ctx, lastErr)
		}
		addr := c.cfg.servers[step.Server]
		lock, reached, queued, err := c.attempt(ctx, name, frame, try, addr)
		if err != nil && errors.Is(err, protocol.ErrUnsupportedVersion) {
			switch {
			case len(claimOpts.value) > 0:
				err = &unsupportedError{addr: addr, feature: valueUnsupported, cause: err}
			case claimOpts.shared:
				err = &unsupportedError{addr: addr, feature: sharedUnsupported, cause: err}
			}
		}
		outcome := attemptOutcome(err, reached)
		switch outcome {
		case retry.Granted:
			plan.Report(outcome, queued)
			return lock, nil
		case retry.ConnectFailed, retry.NotMonolock:
			// No monolock server answered this attempt: whether or not
			// ctx ended it, it is one more server not reached.
			if missed == nil {
				missed = make([]error, len(c.cfg.servers))
			}
			missed[step.Server] = err
			lastErr = errorf("%w: %w", ErrUnavailable, collect(missed))
			if ctx.Err() != nil {
				return nil, interrupted(name, ctx, lastErr)
			}
			if outcome == retry.ConnectFailed {
				queued = 0
			}
			plan.Report(outcome, queued)
			continue
		}
		if ctx.Err() != nil {
			// The interrupted attempt had reached a server: the lock
			// stayed busy, whatever failed before.
			return nil, interrupted(name, ctx, nil)
		}
		clear(missed)
		lastErr = err
		if outcome == retry.Busy {
			lastErr = &busyError{name: name, shared: claimOpts.shared, limit: claimOpts.limit}
		}
		if outcome == retry.Requeue && try && !isServerError(err) {
			lastErr = errorf("%w: %s: %w", ErrUnavailable, addr, err)
		}
		if outcome == retry.NotActive {
			var se *ServerError
			errors.As(err, &se)
			plan.ReportNotActive(leaderIndex(c.cfg.servers, se.Reason))
			continue
		}
		plan.Report(outcome, queued)
	}
}

// collect lists the errors that are set, in server order.
func collect(missed []error) attemptErrors {
	var errs attemptErrors
	for _, err := range missed {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// retryable reports whether a waiting acquisition should try again after err.
func retryable(err error) bool {
	var se *ServerError
	if errors.As(err, &se) {
		return se.Temporary()
	}
	return !errors.Is(err, ErrBusy)
}

// interrupted builds the error for an acquisition that ctx ended.
func interrupted(name string, ctx context.Context, last error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &timeoutError{name: name, last: last}
	}
	if last == nil {
		return errorf("acquire %q: %w", name, ctx.Err())
	}
	return errorf("acquire %q: %w (last attempt: %w)", name, ctx.Err(), last)
}

// sleep waits for d or until ctx is done, reporting whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// attempt makes one claim on one server: connect, ACQUIRE, and wait for the
// grant. reached tells whether the server was reached, and queued how long
// the claim waited in the server's queue.
func (c *Client) attempt(ctx context.Context, name string, frame []byte, try bool, addr string) (lock *Lock, reached bool, queued time.Duration, err error) {
	conn, raw, err := c.dialOne(ctx, addr)
	if err != nil {
		c.cfg.logger.Debug("monolock: connect failed", "server", addr, "err", err)
		return nil, false, 0, err
	}
	lock, queued, err = newClaim(conn, raw, addr, name, frame, try, &c.cfg).acquire(ctx)
	if err == nil || c.cfg.tls == nil {
		return lock, true, queued, err
	}
	if side := certProblem(err); side != noCertProblem {
		// TLS 1.3: the server's refusal of our certificate came with the
		// first read. The handshake failed after all: not reached.
		return nil, false, 0, &connectError{addr: addr, err: err, tls: true, cert: side}
	}
	return lock, true, queued, err
}

func isServerError(err error) bool {
	var se *ServerError
	return errors.As(err, &se) || errors.Is(err, ErrServerEnded)
}

// dialOne connects to addr. conn is what the claim speaks through (TLS or
// not); raw is the TCP connection under it, which is what gets closed, so
// that closing never blocks on a TLS alert.
func (c *Client) dialOne(ctx context.Context, addr string) (conn, raw net.Conn, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.dialTimeout)
	defer cancel()
	// Heartbeats are the liveness check, bounded by the lease; TCP
	// keep-alive would only add system calls to every claim.
	d := net.Dialer{KeepAlive: -1}
	raw, err = d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, &connectError{addr: addr, err: err}
	}
	// Frames are tiny and must not wait to be coalesced: package net sets
	// TCP_NODELAY on every TCP connection it dials, so no call is needed.
	if c.cfg.tls == nil {
		return raw, raw, nil
	}
	cfg := c.cfg.tls
	if cfg.ServerName == "" {
		host, _, splitErr := net.SplitHostPort(addr)
		if splitErr != nil {
			host = addr
		}
		cfg = cfg.Clone()
		cfg.ServerName = host
	}
	tc := tls.Client(raw, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		// A first record that is not TLS: most likely a plaintext
		// monolock server answering the ClientHello with an ERROR.
		var notTLS tls.RecordHeaderError
		return nil, nil, &connectError{addr: addr, err: err, tls: true, notTLS: errors.As(err, &notTLS), cert: certProblem(err)}
	}
	return tc, raw, nil
}
