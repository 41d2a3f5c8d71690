package client

import (
	"context"
	"time"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// The Lock methods of a claim on a connection of its own.

func (c *claim) validUntil() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.core.ValidUntil()
}

func (c *claim) leaseEnd() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.core.LeaseEnd()
}

func (c *claim) ended() <-chan struct{} { return c.endedCh }

func (c *claim) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pollLocked()
}

// release closes the connection: for a valid lock once the server has
// closed its side too, or at the bound.
func (c *claim) release() {
	c.mu.Lock()
	c.pollLocked()
	c.endLocked(ErrReleased)
	c.mu.Unlock()
	c.letGoNow(true)
	<-c.exited
}

func (c *claim) proclaim(ctx context.Context, name string, value []byte) error {
	if !c.valued {
		return errorf("monolock: lock %q was claimed without a value (use the Value option to proclaim)", name)
	}
	frame, err := protocol.AppendProclaim(nil, value)
	if err != nil {
		return errorf("%w: %d bytes, at most %d", err, len(value), protocol.MaxValueLen)
	}
	c.mu.Lock()
	if err := c.pollLocked(); err != nil {
		c.mu.Unlock()
		return err
	}
	seq := c.core.Proclaim(frame)
	// Wake the serving goroutine: it sends the PROCLAIM (all writes are
	// its own), at once or right after the reply it is waiting for.
	_ = c.conn.SetReadDeadline(time.Now())
	c.mu.Unlock()
	if seq == 0 {
		return c.err()
	}
	for {
		c.mu.Lock()
		done := c.core.Proclaimed() >= seq
		c.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-c.proclaimed:
		case <-c.endedCh:
			return c.err()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
