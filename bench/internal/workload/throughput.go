// Package workload runs the benchmark workloads against a systems.System.
// Every workload is bounded in time and stops by itself.
package workload

import (
	"context"
	"errors"
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
	c := runCycles(ctx, len(ws), d, func(i, seq int) error {
		name := fmt.Sprintf("u/%d", i)
		if perCycleNames {
			name = fmt.Sprintf("u/%d/%d", i, seq)
		}
		h, err := ws[i].Acquire(ctx, name)
		if err != nil {
			return err
		}
		return h.Release()
	})
	return c.summary()
}

// cycles is what runCycles measured.
type cycles struct {
	samples  []time.Duration // one per cycle that succeeded
	errs     int
	firstErr error
	elapsed  time.Duration
}

// summary summarises the cycles; with none and an error, it is the error.
func (c cycles) summary() (stats.Summary, error) {
	s := stats.Summarise(c.samples, c.elapsed, c.errs)
	if len(c.samples) == 0 && c.firstErr != nil {
		return s, c.firstErr
	}
	return s, nil
}

// errStopWorker, wrapped by a cycle's error, ends that worker's loop: the
// system cannot do the cycle at all.
var errStopWorker = errors.New("the worker stops")

// runCycles runs cycle on workers goroutines (its worker index and the
// cycle's number in that worker) until d has passed, ctx ends or a worker
// has failed maxErrors times, and times every cycle that succeeds.
func runCycles(ctx context.Context, workers int, d time.Duration, cycle func(worker, seq int) error) cycles {
	var (
		mu  sync.Mutex
		out cycles
		wg  sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(d)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, 1024)
			nerr := 0
			var ferr error
			for seq := 0; time.Now().Before(end) && nerr < maxErrors && ctx.Err() == nil; seq++ {
				t0 := time.Now()
				if err := cycle(i, seq); err != nil {
					nerr++
					if ferr == nil {
						ferr = err
					}
					if errors.Is(err, errStopWorker) {
						break
					}
					continue
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			out.samples = append(out.samples, local...)
			out.errs += nerr
			if out.firstErr == nil {
				out.firstErr = ferr
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	out.elapsed = time.Since(start)
	return out
}
