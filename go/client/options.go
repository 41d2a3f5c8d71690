package client

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/monolock/monolock/go/internal/spec"
)

// Defaults of a Client.
const (
	DefaultServer      = spec.ClientDefaultsDefaultServer
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

// defaultPort is the port of a server address given as a bare host.
const defaultPort = spec.ClientDefaultsDefaultPort

// Option configures a Client.
type Option func(*config) error

// WithServers sets the server addresses: HOST:PORT, [IPV6]:PORT, or a bare
// host (HOST, [IPV6] or an IPv6 address) for port 7117. A connection
// attempt tries them in order and moves to the next when one cannot be
// reached. An address that is none of these makes New fail. Default:
// 127.0.0.1:7117.
func WithServers(addrs ...string) Option {
	return func(c *config) error {
		if len(addrs) == 0 {
			return errors.New("monolock: WithServers needs at least one address")
		}
		servers := make([]string, len(addrs))
		for i, a := range addrs {
			s, err := parseServer(a)
			if err != nil {
				return err
			}
			servers[i] = s
		}
		c.servers = servers
		return nil
	}
}

// parseServer turns a server address into the host:port to dial
// (spec/vectors/addresses.json runs the rule).
func parseServer(addr string) (string, error) {
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("monolock: server address %q: %s (want HOST:PORT, [IPV6]:PORT or a bare host for port %d)", addr, why, defaultPort)
	}
	// A URL ("http://host:port", pasted from a browser or a config of
	// another tool) is the commonest wrong address; say what to drop rather
	// than what the colons look like (spec/vectors/addresses.json messages).
	if i := strings.Index(addr, "://"); i >= 0 {
		return "", fmt.Errorf("monolock: server address %q: drop the scheme %q; give HOST:PORT", addr, addr[:i+3])
	}
	host, port, hasPort := addr, "", false
	switch {
	case addr == "":
		return bad("empty")
	case strings.HasPrefix(addr, "["):
		end := strings.IndexByte(addr, ']')
		if end < 0 {
			return bad("no closing ]")
		}
		host = addr[1:end]
		if rest := addr[end+1:]; rest != "" {
			if rest[0] != ':' {
				return bad("unexpected text after ]")
			}
			port, hasPort = rest[1:], true
		}
		if ip, err := netip.ParseAddr(host); err != nil || !ip.Is6() {
			return bad("not an IPv6 address between [ and ]")
		}
	case strings.Count(addr, ":") > 1:
		// Only an IPv6 address has more than one colon without brackets.
		if _, err := netip.ParseAddr(addr); err != nil {
			return bad("not an IPv6 address, and one colon at most is allowed otherwise")
		}
	default:
		host, port, hasPort = strings.Cut(addr, ":")
		if host == "" {
			// Refused, not taken as localhost (spec/vectors/addresses.json).
			return "", fmt.Errorf("monolock: server address %q: no host (an empty host is not taken as localhost); give HOST:PORT", addr)
		}
		for _, r := range host {
			if !(r == '-' || r == '.' || r == '_' || '0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z') {
				return bad(fmt.Sprintf("%q is not allowed in a host name", r))
			}
		}
	}
	if !hasPort {
		return net.JoinHostPort(host, strconv.Itoa(defaultPort)), nil
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return bad("the port must be a number from 1 to 65535")
	}
	return net.JoinHostPort(host, port), nil
}

// WithLease sets the lease: the server drops a session that stays silent
// this long, so it bounds how long a crashed holder keeps a lock. It must be
// a whole number of milliseconds from 1 ms to 4294967295 ms (2^32-1);
// anything else is refused, never rounded, with an error that
// errors.Is protocol.ErrInvalidLease (code 0x17). Default: 10s.
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
// ServerName is empty, the host of each server address is used. Without a
// ClientSessionCache, the client keeps one of its own: a claim on a
// connection of its own then resumes the TLS session of an earlier one
// instead of a full handshake (a release sends close_notify, which keeps
// the ticket good). A Session pays its one handshake for all its claims.
func WithTLS(cfg *tls.Config) Option {
	return func(c *config) error {
		if cfg != nil && cfg.ClientSessionCache == nil {
			cfg = cfg.Clone()
			cfg.ClientSessionCache = tls.NewLRUClientSessionCache(0)
		}
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
	if d%time.Millisecond != 0 || d/time.Millisecond < spec.LeaseMSMin || d/time.Millisecond > spec.LeaseMSMax {
		return 0, leaseError(d)
	}
	return uint32(d / time.Millisecond), nil
}
