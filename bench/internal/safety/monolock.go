package safety

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/monolock/monolock/go/client"
)

// PollEvery is how often the polled-check holder calls Lock.Err.
const PollEvery = 10 * time.Millisecond

// GoPolled is the canonical Go client in this process, its holder told by
// the polled check: Lock.Err called every PollEvery, as an application
// checks before each step of its work. The competitor is a second client
// on the server's direct address.
func GoPolled(server string, lease time.Duration) Recipe {
	return Recipe{
		Name:     "monolock go (polled Err)",
		Signal:   "`Lock.Err()` != nil, polled every 10 ms",
		Upstream: server,
		New: func(name string) Trial {
			return &goPolledTrial{Events: NewEvents(), server: server, name: name, lease: lease}
		},
	}
}

type goPolledTrial struct {
	Events
	server, name string
	lease        time.Duration

	mu     sync.Mutex
	held   *client.Lock // the holder's
	won    *client.Lock // the competitor's, once granted
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (t *goPolledTrial) Hold(ctx context.Context, addr string) error {
	c, err := client.New(client.WithServers(addr), client.WithLease(t.lease))
	if err != nil {
		return err
	}
	l, err := c.Acquire(ctx, t.name)
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.held = l
	t.mu.Unlock()
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		tick := time.NewTicker(PollEvery)
		defer tick.Stop()
		for {
			select {
			case <-t.Halted():
				return
			case <-tick.C:
				if l.Err() != nil {
					t.Tell(time.Now())
					return
				}
			}
		}
	}()
	return nil
}

func (t *goPolledTrial) Compete(ctx context.Context) error {
	queued := make(chan struct{})
	var once sync.Once
	c, err := client.New(client.WithServers(t.server), client.WithLease(t.lease),
		client.WithOnWaiting(func(string) { once.Do(func() { close(queued) }) }))
	if err != nil {
		return err
	}
	actx, cancel := context.WithCancel(context.Background())
	t.mu.Lock()
	t.cancel = cancel
	t.mu.Unlock()
	got := make(chan struct{})
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		l, err := c.Acquire(actx, t.name)
		if err != nil {
			return
		}
		t.Grant(time.Now())
		close(got)
		t.mu.Lock()
		t.won = l
		t.mu.Unlock()
	}()
	select {
	case <-queued:
		return nil
	case <-got: // granted at once: runOne sees it before the fault
		return nil
	case <-ctx.Done():
		return errors.Join(errNotQueued, ctx.Err())
	}
}

func (t *goPolledTrial) Close() {
	t.Halt()
	t.mu.Lock()
	held, cancel := t.held, t.cancel
	t.mu.Unlock()
	if held != nil {
		held.Release()
	}
	if cancel != nil {
		cancel()
	}
	t.wg.Wait()
	t.mu.Lock()
	won := t.won
	t.mu.Unlock()
	if won != nil {
		won.Release()
	}
}
