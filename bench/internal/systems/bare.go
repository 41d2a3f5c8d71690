package systems

import (
	"context"

	"github.com/monolock/monolock/bench/internal/floor"
)

// bareSystem is the floor's bare client (see package floor): dial, write
// ACQUIRE, read the 9-byte ACQUIRED, half-close, read until the server's
// close. Against the floor server it is the Floor system; against
// `monolock serve` it is MonolockBare, the real server with the least
// client work the protocol allows.
type bareSystem struct {
	name, addr string
	o          Options
}

// OpenBare returns the bare client of the server at addr, named name.
func OpenBare(name, addr string, o Options) (System, error) {
	return &bareSystem{name: name, addr: addr, o: o}, nil
}

func (b *bareSystem) Name() string { return b.name }
func (b *bareSystem) Close() error { return nil }

func (b *bareSystem) Worker(context.Context) (Worker, error) {
	return bareWorker{floor.NewClient(b.addr, b.o.Lease)}, nil
}

type bareWorker struct{ c *floor.Client }

func (w bareWorker) Acquire(ctx context.Context, name string) (Held, error) {
	cl, err := w.c.Acquire(ctx, name)
	if err != nil {
		return nil, err
	}
	return cl, nil
}

func (w bareWorker) Close() error { return w.c.Close() }
