package monolock

import (
	"crypto/tls"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/monolock/monolock/go/client"
	"github.com/monolock/monolock/go/internal/spec"
)

// Config holds the settings of a Client. Create it with NewConfig (in Java
// and Kotlin: new Config()), which fills in the defaults, then change fields.
// NewClient copies what it needs: later changes do not affect the client.
type Config struct {
	// Servers lists the servers as "host:port" ("[ipv6]:port", or a bare
	// host for port 7117), separated by commas. A connection attempt tries
	// them in order. Default: "127.0.0.1:7117".
	Servers string
	// LeaseMillis is the lease in milliseconds (1 to 4294967295): the server
	// drops a holder that stays silent this long. Default: 10000.
	LeaseMillis int64
	// DialTimeoutMillis bounds connecting to one server, TLS handshake
	// included. Default: 5000.
	DialTimeoutMillis int64

	// UseTLS makes the client speak TLS. Setting any of the PEM fields
	// below implies it.
	UseTLS bool
	// ServerName is the name the server's certificate must carry. Empty:
	// the host part of each server address.
	ServerName string
	// RootCAsPEM holds the PEM certificates that may sign the server's
	// certificate. Empty: the system's roots.
	RootCAsPEM []byte
	// ClientCertPEM and ClientKeyPEM are the client's certificate chain and
	// private key, in PEM, for servers that require mutual TLS.
	ClientCertPEM []byte
	ClientKeyPEM  []byte

	// Waiting, when set, hears every time an acquisition enters a server's
	// queue (again after each re-queue).
	Waiting WaitingListener
}

// WaitingListener is implemented by the app to hear that an acquisition is
// waiting in the server's queue. OnWaiting runs on the thread that called
// Acquire, which it delays while it runs: keep it short.
type WaitingListener interface {
	OnWaiting(name string)
}

// NewConfig returns a Config with the defaults of the Go client.
func NewConfig() *Config {
	return &Config{
		Servers:           client.DefaultServer,
		LeaseMillis:       client.DefaultLease.Milliseconds(),
		DialTimeoutMillis: client.DefaultDialTimeout.Milliseconds(),
	}
}

// options translates the config into the Go client's options. Invalid
// settings fail here, before any connection: a lease out of range with the
// same code the server would send (0x17), anything else as KindConfig.
func (c *Config) options() ([]client.Option, error) {
	servers := strings.Split(c.Servers, ",")
	for i := range servers {
		servers[i] = strings.TrimSpace(servers[i])
	}
	// Range-check here: the millisecond count could overflow a Duration.
	if c.LeaseMillis < spec.LeaseMSMin || c.LeaseMillis > spec.LeaseMSMax {
		return nil, leaseError{c.LeaseMillis}
	}
	opts := []client.Option{
		client.WithServers(servers...),
		client.WithLease(time.Duration(c.LeaseMillis) * time.Millisecond),
	}
	if c.DialTimeoutMillis < 1 || c.DialTimeoutMillis > math.MaxInt64/int64(time.Millisecond) {
		return nil, configError(fmt.Errorf("monolock: dial timeout must be a positive number of milliseconds, got %d", c.DialTimeoutMillis))
	}
	opts = append(opts, client.WithDialTimeout(time.Duration(c.DialTimeoutMillis)*time.Millisecond))
	if tc, err := c.tlsConfig(); err != nil {
		return nil, configError(err)
	} else if tc != nil {
		opts = append(opts, client.WithTLS(tc))
	}
	if w := c.Waiting; w != nil {
		opts = append(opts, client.WithOnWaiting(w.OnWaiting))
	}
	return opts, nil
}

// tlsConfig builds the TLS settings, or nil for plain TCP.
func (c *Config) tlsConfig() (*tls.Config, error) {
	if !c.UseTLS && len(c.RootCAsPEM) == 0 && len(c.ClientCertPEM) == 0 && len(c.ClientKeyPEM) == 0 {
		return nil, nil
	}
	tc, err := client.TLSFromPEM(c.RootCAsPEM, c.ClientCertPEM, c.ClientKeyPEM, c.ServerName)
	if err != nil {
		return nil, fmt.Errorf("monolock: TLS (RootCAsPEM, ClientCertPEM, ClientKeyPEM): %w", err)
	}
	return tc, nil
}
