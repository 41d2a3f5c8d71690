// Package workload runs the benchmark workloads against a systems.System.
// Every workload is bounded in time and stops by itself.
package workload

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/monolock/monolock/bench/internal/stats"
	"github.com/monolock/monolock/bench/internal/systems"
)

// maxErrors aborts a cell whose acquisitions keep failing.
const maxErrors = 1000

// grace bounds how long a cell may overrun its duration (the last waiters
// finishing), so a wedged system cannot hang the run.
const grace = 15 * time.Second

// openWorkers creates n workers of sys.
func openWorkers(ctx context.Context, sys systems.System, n int) ([]systems.Worker, func(), error) {
	ws := make([]systems.Worker, 0, n)
	closeAll := func() {
		for _, w := range ws {
			_ = w.Close()
		}
	}
	for range n {
		w, err := sys.Worker(ctx)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("%s worker: %w", sys.Name(), err)
		}
		ws = append(ws, w)
	}
	return ws, closeAll, nil
}

// Throughput runs acquire+release cycles, each worker on its own names,
// for d, and summarises cycle latency and cycles per second. With
// perCycleNames every cycle uses a fresh name; otherwise each worker
// reuses one name (for recipes whose names are persistent nodes).
func Throughput(ctx context.Context, sys systems.System, workers int, d time.Duration, perCycleNames bool) (stats.Summary, error) {
	ws, closeAll, err := openWorkers(ctx, sys, workers)
	if err != nil {
		return stats.Summary{}, err
	}
	defer closeAll()

	ctx, cancel := context.WithTimeout(ctx, d+grace)
	defer cancel()
	var (
		mu       sync.Mutex
		samples  []time.Duration
		errs     int
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(d)
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, 1024)
			nerr := 0
			var ferr error
			for seq := 0; time.Now().Before(end) && nerr < maxErrors && ctx.Err() == nil; seq++ {
				name := fmt.Sprintf("u/%d", i)
				if perCycleNames {
					name = fmt.Sprintf("u/%d/%d", i, seq)
				}
				t0 := time.Now()
				h, err := w.Acquire(ctx, name)
				if err == nil {
					err = h.Release()
				}
				if err != nil {
					nerr++
					if ferr == nil {
						ferr = err
					}
					continue
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			samples = append(samples, local...)
			errs += nerr
			if firstErr == nil {
				firstErr = ferr
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	s := stats.Summarise(samples, time.Since(start), errs)
	if len(samples) == 0 && firstErr != nil {
		return s, firstErr
	}
	return s, nil
}
