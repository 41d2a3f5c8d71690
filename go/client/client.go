package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
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
// as ctx allows. When ctx ends first, the error wraps ctx.Err(), and also the
// cause of the last failed attempt if the attempt that ctx interrupted never
// reached a server (so errors.Is(err, ErrUnavailable) tells "could not reach
// the server" from "the lock stayed busy"). Terminal server errors
// (*ServerError) are returned at once.
//
// ctx only bounds the wait: once granted, the lock is held until Release or
// until it is lost, whatever happens to ctx.
func (c *Client) Acquire(ctx context.Context, name string) (*Lock, error) {
	return c.acquire(ctx, name, false)
}

// TryAcquire takes the named lock if it is free and returns ErrBusy at once
// if another session holds it. It makes one attempt: a server error is
// returned as *ServerError (temporary or not), and a server that cannot be
// reached or does not answer gives an error wrapping ErrUnavailable.
func (c *Client) TryAcquire(ctx context.Context, name string) (*Lock, error) {
	return c.acquire(ctx, name, true)
}

func (c *Client) acquire(ctx context.Context, name string, try bool) (*Lock, error) {
	// Validation first: a refused name never costs a connection.
	frame, err := protocol.AppendAcquire(nil, name, c.cfg.leaseMS)
	if err != nil {
		return nil, err
	}
	var (
		log     *slog.Logger // built on the first retry: most claims never log
		plan    = retry.New(len(c.cfg.servers), try)
		lastErr error   // the last failure, for the caller
		pass    []error // connect failures since a server last answered
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
		if err == nil {
			plan.Report(retry.Granted, queued)
			return lock, nil
		}
		if ctx.Err() != nil {
			if reached {
				lastErr = nil // the interrupted attempt had reached a server
			}
			return nil, interrupted(name, ctx, lastErr)
		}
		if !reached {
			pass = append(pass, fmt.Errorf("%s: %w", addr, err))
			lastErr = fmt.Errorf("%w: %w", ErrUnavailable, errors.Join(pass...))
			plan.Report(retry.ConnectFailed, 0)
			continue
		}
		pass = nil
		lastErr = err
		var notMonolock *notMonolockError
		switch {
		case errors.As(err, &notMonolock):
			plan.Report(retry.NotMonolock, queued)
		case errors.Is(err, ErrBusy):
			plan.Report(retry.Busy, queued)
		case !retryable(err):
			plan.Report(retry.Terminal, queued)
		default:
			if try && !isServerError(err) {
				lastErr = fmt.Errorf("%w: %s: %w", ErrUnavailable, addr, err)
			}
			plan.Report(retry.Requeue, queued)
		}
	}
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
	if last == nil {
		return fmt.Errorf("monolock: acquire %q: %w", name, ctx.Err())
	}
	return fmt.Errorf("monolock: acquire %q: %w (last attempt: %w)", name, ctx.Err(), last)
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
		if ctx.Err() != nil {
			return nil, false, 0, ctx.Err()
		}
		c.cfg.logger.Debug("monolock: connect failed", "server", addr, "err", err)
		return nil, false, 0, err
	}
	cl := startClaim(conn, raw, addr, name, frame, try, &c.cfg)
	for {
		select {
		case ev := <-cl.events:
			switch {
			case ev.waiting:
				if c.cfg.onWaiting != nil {
					c.cfg.onWaiting(name)
				}
			case ev.lock != nil:
				return ev.lock, true, ev.queued, nil
			default:
				return nil, true, ev.queued, ev.err
			}
		case <-ctx.Done():
			cl.abandon()
			return nil, true, 0, ctx.Err()
		}
	}
}

func isServerError(err error) bool {
	var se *ServerError
	return errors.As(err, &se)
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
		return nil, nil, err
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
		return nil, nil, err
	}
	return tc, raw, nil
}
