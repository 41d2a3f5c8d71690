package client

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"math"
	"time"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// Defaults of a Client.
const (
	DefaultServer      = "127.0.0.1:7117"
	DefaultLease       = 10 * time.Second
	DefaultDialTimeout = 5 * time.Second
)

// config is what the options set.
type config struct {
	servers     []string
	lease       time.Duration
	leaseMS     uint32
	dialTimeout time.Duration
	tls         *tls.Config
	onWaiting   func(name string)
	logger      *slog.Logger
}

// Option configures a Client.
type Option func(*config) error

// WithServers sets the server addresses (host:port). A connection attempt
// tries them in order and moves to the next when one cannot be reached.
// Default: 127.0.0.1:7117.
func WithServers(addrs ...string) Option {
	return func(c *config) error {
		if len(addrs) == 0 {
			return errors.New("monolock: WithServers needs at least one address")
		}
		for _, a := range addrs {
			if a == "" {
				return errors.New("monolock: empty server address")
			}
		}
		c.servers = append([]string(nil), addrs...)
		return nil
	}
}

// WithLease sets the lease: the server drops a session that stays silent
// this long, so it bounds how long a crashed holder keeps a lock. It must be
// a whole number of milliseconds from 1 ms to 2^32-1 ms; anything else is
// protocol.ErrInvalidLease. Default: 10s.
func WithLease(d time.Duration) Option {
	return func(c *config) error {
		ms, err := leaseMillis(d)
		if err != nil {
			return err
		}
		c.lease, c.leaseMS = d, ms
		return nil
	}
}

// WithDialTimeout bounds connecting to one server, TLS handshake included.
// Default: 5s.
func WithDialTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return errors.New("monolock: dial timeout must be positive")
		}
		c.dialTimeout = d
		return nil
	}
}

// WithTLS makes the client speak TLS with this configuration. When
// ServerName is empty, the host of each server address is used.
func WithTLS(cfg *tls.Config) Option {
	return func(c *config) error {
		c.tls = cfg
		return nil
	}
}

// WithOnWaiting sets a function called with the lock name each time an
// acquisition enters the server's queue (the server answered WAITING to an
// ACQUIRE; again after every re-queue). It runs on the goroutine that called
// Acquire, never under a lock of this package, and delays the acquisition
// while it runs.
func WithOnWaiting(f func(name string)) Option {
	return func(c *config) error {
		c.onWaiting = f
		return nil
	}
}

// WithLogger sets where the client logs: retries of a waiting acquisition
// at Warn, lost locks at Info, state changes at Debug. Default: nothing is
// logged.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		c.logger = l
		return nil
	}
}

// leaseMillis converts a lease to the wire's lease_ms, refusing what the
// server would refuse (0) and what the wire cannot carry.
func leaseMillis(d time.Duration) (uint32, error) {
	if d < time.Millisecond || d%time.Millisecond != 0 || d/time.Millisecond > math.MaxUint32 {
		return 0, protocol.ErrInvalidLease
	}
	return uint32(d / time.Millisecond), nil
}
