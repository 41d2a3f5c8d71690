package systems

import (
	"context"

	"github.com/monolock/monolock/bench/internal/floor"
)

// bareSessionSystem is the floor's bare session client (see package
// floor): one session per worker, a claim = OPEN, read STREAM(ACQUIRED),
// RELEASE, read RELEASED. Against the floor server it is SessionFloor;
// against `monolock serve` it is MonolockSessionBare, the real server's
// sessions with the least client work the protocol allows.
type bareSessionSystem struct {
	name, addr string
	o          Options
}

// OpenBareSession returns the bare session client of the server at addr,
// named name.
func OpenBareSession(name, addr string, o Options) (System, error) {
	return &bareSessionSystem{name: name, addr: addr, o: o}, nil
}

func (b *bareSessionSystem) Name() string { return b.name }
func (b *bareSessionSystem) Close() error { return nil }

func (b *bareSessionSystem) Worker(context.Context) (Worker, error) {
	return bareSessionWorker{floor.NewSessionClient(b.addr, b.o.Lease)}, nil
}

type bareSessionWorker struct{ c *floor.SessionClient }

func (w bareSessionWorker) Acquire(ctx context.Context, name string) (Held, error) {
	cl, err := w.c.Acquire(ctx, name)
	if err != nil {
		return nil, err
	}
	return cl, nil
}

// Close ends the worker's session.
func (w bareSessionWorker) Close() error { return w.c.Close() }
