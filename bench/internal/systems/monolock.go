package systems

import (
	"context"

	"github.com/monolock/monolock/go/client"
)

// monolockSystem uses the canonical Go client: one client per worker, one
// connection per Acquire, release = close.
type monolockSystem struct {
	addr string
	o    Options
}

// OpenMonolock returns the monolock system for the server at addr.
func OpenMonolock(addr string, o Options) (System, error) {
	return &monolockSystem{addr: addr, o: o}, nil
}

func (m *monolockSystem) Name() string { return Monolock }
func (m *monolockSystem) Close() error { return nil }

func (m *monolockSystem) Worker(context.Context) (Worker, error) {
	c, err := client.New(client.WithServers(m.addr), client.WithLease(m.o.Lease))
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
