package peers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/monolock/monolock/bench/internal/systems"
)

// zkSystem is the ephemeral-sequential recipe of go-zookeeper's zk.Lock:
// create /lock/NAME/lock-<seq> (ephemeral, sequential), and if it is not
// the lowest child, watch the next lower one. All workers share one
// ZooKeeper session; its timeout is the lease.
type zkSystem struct {
	conn *zk.Conn
	o    systems.Options
}

type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

// DialZooKeeper opens one ZooKeeper session with the given timeout and
// waits until it is established.
func DialZooKeeper(ctx context.Context, addr string, timeout time.Duration) (*zk.Conn, error) {
	conn, events, err := zk.Connect([]string{addr}, timeout, zk.WithLogger(quietLogger{}))
	if err != nil {
		return nil, err
	}
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				// Keep draining so the client never blocks on its channel.
				go func() {
					for range events {
					}
				}()
				return conn, nil
			}
		case <-ctx.Done():
			conn.Close()
			return nil, fmt.Errorf("zookeeper session: %w", ctx.Err())
		case <-time.After(10 * time.Second):
			conn.Close()
			return nil, errors.New("zookeeper session: not established in 10 s")
		}
	}
}

// OpenZooKeeper opens the shared session to addr.
func OpenZooKeeper(ctx context.Context, addr string, o systems.Options) (systems.System, error) {
	conn, err := DialZooKeeper(ctx, addr, o.Lease)
	if err != nil {
		return nil, err
	}
	return &zkSystem{conn: conn, o: o}, nil
}

func (z *zkSystem) Name() string { return systems.ZooKeeper }
func (z *zkSystem) Close() error { z.conn.Close(); return nil }
func (z *zkSystem) Worker(context.Context) (systems.Worker, error) {
	return sharedWorker(z.Acquire), nil
}

// Acquire runs zk.Lock, which takes no context: when ctx ends first, the
// waiting lock is left to finish in the background and released at once,
// so it does not block the queue behind it.
func (z *zkSystem) Acquire(ctx context.Context, name string) (systems.Held, error) {
	l := zk.NewLock(z.conn, "/lock/"+name, zk.WorldACL(zk.PermAll))
	done := make(chan error, 1)
	go func() { done <- l.Lock() }()
	select {
	case err := <-done:
		if err != nil {
			return nil, err
		}
		return zkHeld{l}, nil
	case <-ctx.Done():
		go func() {
			if <-done == nil {
				_ = l.Unlock()
			}
		}()
		return nil, ctx.Err()
	}
}

type zkHeld struct{ l *zk.Lock }

func (h zkHeld) Release() error { return h.l.Unlock() }
