package drivers

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/monolock/monolock/bench/internal/stats"
	"github.com/monolock/monolock/conformance/driver"
	"github.com/monolock/monolock/go/testkit/pipe"
)

// eventTimeout bounds every wait for a driver's event.
const eventTimeout = 15 * time.Second

// cycle acquires name under a fresh id and returns the id's event channel
// and the acquired event.
func (d *Driver) acquire(id, server, name string, leaseMS int) (chan driver.Event, driver.Event, error) {
	ch := d.expect(id)
	lease, timeout := uint64(leaseMS), eventTimeout.Milliseconds()
	err := d.send(pipe.Command{Cmd: pipe.Acquire, ID: id, Servers: []string{server}, Name: &name,
		LeaseMS: &lease, Mode: pipe.ModeWait, TimeoutMS: &timeout})
	if err != nil {
		return ch, driver.Event{}, err
	}
	ev, err := d.wait(ch, eventTimeout+5*time.Second, pipe.Acquired)
	return ch, ev, err
}

func (d *Driver) release(ch chan driver.Event, id string) error {
	defer d.forget(id)
	if err := d.send(pipe.Command{Cmd: pipe.Release, ID: id}); err != nil {
		return err
	}
	_, err := d.wait(ch, eventTimeout, pipe.Released)
	return err
}

// Uncontended runs workers concurrent acquire -> release loops on fresh
// names in one driver for dur; latency is from the acquire command to the
// released event, as seen by the runner.
func Uncontended(ctx context.Context, d *Driver, server string, workers int, dur time.Duration) (stats.Summary, error) {
	var (
		mu      sync.Mutex
		samples []time.Duration
		errs    int
		first   error
		wg      sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(dur)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; time.Now().Before(end) && ctx.Err() == nil; seq++ {
				id := fmt.Sprintf("u%d-%d", w, seq)
				t0 := time.Now()
				ch, _, err := d.acquire(id, server, fmt.Sprintf("drv/u/%d/%d/%d", start.UnixNano(), w, seq), 10000)
				if err == nil {
					err = d.release(ch, id)
				} else {
					d.forget(id)
				}
				mu.Lock()
				if err != nil {
					errs++
					if first == nil {
						first = err
					}
				} else {
					samples = append(samples, time.Since(t0))
				}
				mu.Unlock()
				if err != nil && errs > 20 {
					return
				}
			}
		}()
	}
	wg.Wait()
	s := stats.Summarise(samples, time.Since(start), errs)
	if len(samples) == 0 && first != nil {
		return s, first
	}
	return s, nil
}

// Handoff runs workers acquire -> release loops on one name in one driver
// for dur; a handoff's latency runs from the holder's release command to
// the next waiter's acquired event, both at the runner's end of the pipe.
func Handoff(ctx context.Context, d *Driver, server string, workers int, dur time.Duration) (stats.Summary, error) {
	base := time.Now()
	now := func() int64 { return int64(time.Since(base)) }
	name := fmt.Sprintf("drv/h/%d", base.UnixNano())
	var (
		lastRelease atomic.Int64
		mu          sync.Mutex
		samples     []time.Duration
		errs        int
		first       error
		wg          sync.WaitGroup
	)
	lastRelease.Store(-1)
	end := base.Add(dur)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; time.Now().Before(end) && ctx.Err() == nil; seq++ {
				id := fmt.Sprintf("h%d-%d", w, seq)
				began := now()
				ch, ev, err := d.acquire(id, server, name, 10000)
				if err != nil {
					d.forget(id)
					mu.Lock()
					errs++
					if first == nil {
						first = err
					}
					mu.Unlock()
					if errs > 20 {
						return
					}
					continue
				}
				granted := int64(d.at(ev).Sub(base))
				if rel := lastRelease.Load(); rel >= began {
					mu.Lock()
					samples = append(samples, time.Duration(granted-rel))
					mu.Unlock()
				}
				lastRelease.Store(now())
				if err := d.release(ch, id); err != nil {
					mu.Lock()
					errs++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	s := stats.Summarise(samples, time.Since(base), errs)
	if len(samples) == 0 && first != nil {
		return s, first
	}
	return s, nil
}
