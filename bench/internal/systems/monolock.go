package systems

import (
	"context"
	"crypto/tls"
	"fmt"

	"github.com/monolock/monolock/go/client"
)

// monolockSystem uses the canonical Go client: one client per worker, one
// connection per Acquire, release = close.
type monolockSystem struct {
	name string
	opts []client.Option
}

// OpenMonolock returns the monolock system for the server at addr.
func OpenMonolock(addr string, o Options) (System, error) {
	return OpenMonolockNamed(Monolock, addr, o)
}

// OpenMonolockNamed returns the single-claim system name (Monolock,
// MonolockBefore, MonolockTLS or MonolockTLSNoResume) for the server at
// addr.
func OpenMonolockNamed(name, addr string, o Options) (System, error) {
	opts, err := clientOptions(name, addr, o)
	if err != nil {
		return nil, err
	}
	return &monolockSystem{name: name, opts: opts}, nil
}

// clientOptions are the Go client's options for system name: the server,
// the lease and, for the TLS systems, o.TLS (with resumption off for
// MonolockTLSNoResume).
func clientOptions(name, addr string, o Options) ([]client.Option, error) {
	opts := []client.Option{client.WithServers(addr), client.WithLease(o.Lease)}
	if !TLS(name) {
		return opts, nil
	}
	if o.TLS == nil {
		return nil, fmt.Errorf("%s: no TLS configuration", name)
	}
	cfg := o.TLS
	if name == MonolockTLSNoResume {
		cfg = NoResumption(cfg)
	}
	return append(opts, client.WithTLS(cfg)), nil
}

// NoResumption is cfg with TLS session resumption off: the client neither
// offers a ticket nor keeps one (SessionTicketsDisabled), whatever session
// cache the client installs, so every connection is a full handshake.
func NoResumption(cfg *tls.Config) *tls.Config {
	c := cfg.Clone()
	c.SessionTicketsDisabled = true
	return c
}

func (m *monolockSystem) Name() string { return m.name }
func (m *monolockSystem) Close() error { return nil }

func (m *monolockSystem) Worker(context.Context) (Worker, error) {
	c, err := client.New(m.opts...)
	if err != nil {
		return nil, err
	}
	return monolockWorker{c}, nil
}

type monolockWorker struct{ c *client.Client }

func (w monolockWorker) Acquire(ctx context.Context, name string) (Held, error) {
	l, err := w.c.Acquire(ctx, name)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// AcquireMode takes name shared (client.Shared) or as one of m.Limit
// permits (client.Limit) when m asks, exclusive otherwise.
func (w monolockWorker) AcquireMode(ctx context.Context, name string, m Mode) (Held, error) {
	var opts []client.AcquireOption
	switch {
	case m.Limit > 0:
		opts = append(opts, client.Limit(m.Limit))
	case m.Shared:
		opts = append(opts, client.Shared())
	}
	l, err := w.c.Acquire(ctx, name, opts...)
	if err != nil {
		return nil, err
	}
	return l, nil
}

func (w monolockWorker) Close() error { return nil }
