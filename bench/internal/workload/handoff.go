package workload

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/monolock/monolock/bench/internal/stats"
	"github.com/monolock/monolock/bench/internal/systems"
)

// HandoffResult is the contended workload's outcome.
type HandoffResult struct {
	// Latency summarises handoffs: the time from a holder's release to the
	// grant of a worker that was already waiting. Its PerSec is handoffs/s.
	Latency stats.Summary `json:"latency"`
	// Grants counts every grant, handoffs and uncontested ones alike.
	Grants       int     `json:"grants"`
	GrantsPerSec float64 `json:"grants_per_sec"`
	// Wait summarises every acquisition from the Acquire call to its
	// grant: what a contending worker waits, including the times a
	// polling recipe lets the releaser take the lock straight back.
	Wait stats.Summary `json:"wait"`
}

// Handoff runs workers that loop acquire -> release on one name for d.
func Handoff(ctx context.Context, sys systems.System, workers int, d time.Duration, name string) (HandoffResult, error) {
	ws, closeAll, err := openWorkers(ctx, sys, workers)
	if err != nil {
		return HandoffResult{}, err
	}
	defer closeAll()

	ctx, cancel := context.WithTimeout(ctx, d+grace)
	defer cancel()
	base := time.Now()
	now := func() int64 { return int64(time.Since(base)) } // monotonic
	var (
		lastRelease atomic.Int64 // when the last holder started to release
		grants      atomic.Int64
		mu          sync.Mutex
		samples     []time.Duration
		waits       []time.Duration
		errs        int
		firstErr    error
		wg          sync.WaitGroup
	)
	lastRelease.Store(-1)
	end := base.Add(d)
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local, localWaits []time.Duration
			nerr := 0
			var ferr error
			for time.Now().Before(end) && nerr < maxErrors && ctx.Err() == nil {
				began := now()
				h, err := w.Acquire(ctx, name)
				if err != nil {
					nerr++
					if ferr == nil {
						ferr = err
					}
					continue
				}
				granted := now()
				grants.Add(1)
				localWaits = append(localWaits, time.Duration(granted-began))
				// A handoff: somebody released while this worker waited.
				if rel := lastRelease.Load(); rel >= began {
					local = append(local, time.Duration(granted-rel))
				}
				lastRelease.Store(now())
				if err := h.Release(); err != nil && ferr == nil {
					ferr = err
				}
			}
			mu.Lock()
			samples = append(samples, local...)
			waits = append(waits, localWaits...)
			errs += nerr
			if firstErr == nil {
				firstErr = ferr
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(base)
	r := HandoffResult{Latency: stats.Summarise(samples, elapsed, errs), Grants: int(grants.Load()), Wait: stats.Summarise(waits, elapsed, 0)}
	r.GrantsPerSec = float64(r.Grants) / elapsed.Seconds()
	if r.Grants == 0 && firstErr != nil {
		return r, firstErr
	}
	return r, nil
}
