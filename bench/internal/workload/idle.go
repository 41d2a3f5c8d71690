package workload

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/monolock/monolock/bench/internal/procstat"
)

// IdleResult is what one idle-holder cell measured on the server process.
type IdleResult struct {
	Holders         int           `json:"holders"`     // asked for
	Established     int           `json:"established"` // holding when measured
	Lost            int64         `json:"lost"`        // dropped during the window
	MemBefore       int64         `json:"mem_before"`
	MemAfter        int64         `json:"mem_after"`
	BytesPerHolder  float64       `json:"bytes_per_holder"`
	CPUCores        float64       `json:"cpu_cores"` // server CPU time / window
	Window          time.Duration `json:"window_ns"`
	Refreshes       int64         `json:"refreshes"` // heartbeats or lease refreshes sent in the window
	Setup           time.Duration `json:"setup_ns"`
	RefreshInterval time.Duration `json:"refresh_interval_ns"`
}

// Holders is a set of idle lock holders kept alive by their generator.
type Holders struct {
	established int
	refreshes   *atomic.Int64 // may be nil
	lost        *atomic.Int64 // may be nil
	close       func()
}

// NewHolders is the set of established holders that close ends; refreshes
// and lost, when not nil, count the refreshes that the holders' generator
// got through and those it lost.
func NewHolders(established int, refreshes, lost *atomic.Int64, close func()) *Holders {
	return &Holders{established: established, refreshes: refreshes, lost: lost, close: close}
}

// IdleSetup opens n holders; the server process is pid. IdleMonolock is
// monolock's; package peeridle has the peers'.
type IdleSetup func(ctx context.Context, n int, lease time.Duration) (*Holders, error)

// MeasureIdle opens n holders with setup, lets them settle for one lease
// refresh period, and measures the server's memory growth and its CPU time
// over window.
func MeasureIdle(ctx context.Context, pid, n int, lease, window time.Duration, setup IdleSetup) (IdleResult, error) {
	r := IdleResult{Holders: n, Window: window, RefreshInterval: lease / 4}
	r.MemBefore = procstat.Memory(pid)
	t0 := time.Now()
	h, err := setup(ctx, n, lease)
	if err != nil {
		return r, err
	}
	defer h.close()
	r.Setup = time.Since(t0)
	if !SleepCtx(ctx, lease/4) { // one refresh round on every holder
		return r, ctx.Err()
	}
	r.MemAfter = procstat.Memory(pid)
	r.Established = h.established
	if h.established > 0 {
		r.BytesPerHolder = float64(r.MemAfter-r.MemBefore) / float64(h.established)
	}
	var beats0, lost0 int64
	if h.refreshes != nil {
		beats0 = h.refreshes.Load()
	}
	if h.lost != nil {
		lost0 = h.lost.Load()
	}
	cpu0, w0 := procstat.CPU(pid), time.Now()
	if !SleepCtx(ctx, window) {
		return r, ctx.Err()
	}
	r.CPUCores = (procstat.CPU(pid) - cpu0).Seconds() / time.Since(w0).Seconds()
	if h.refreshes != nil {
		r.Refreshes = h.refreshes.Load() - beats0
	}
	if h.lost != nil {
		r.Lost = h.lost.Load() - lost0
	}
	return r, nil
}

// SleepCtx sleeps for d and reports whether it did before ctx ended.
func SleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Parallel runs f(i) for i in [0,n) on k goroutines and returns how many
// succeeded and the first error.
func Parallel(ctx context.Context, n, k int, f func(i int) error) (int, error) {
	var (
		next, ok atomic.Int64
		errOnce  sync.Once
		first    error
		wg       sync.WaitGroup
	)
	for range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					errOnce.Do(func() { first = fmt.Errorf("holder %d: %w", i, err) })
					continue
				}
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	return int(ok.Load()), first
}
