package workload

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/monolock/monolock/bench/internal/stats"
	"github.com/monolock/monolock/bench/internal/systems"
)

// Gauge counts the claims that certainly hold a name: a worker enters once
// its Acquire has returned and leaves before it calls Release, so the
// count never includes a claim that might already have let go. A count
// above what the lock allows is therefore a real overlap, never an
// artefact of the measurement.
type Gauge struct {
	n, max atomic.Int64
}

// Enter records one more holder and returns the count including it.
func (g *Gauge) Enter() int64 {
	n := g.n.Add(1)
	for {
		m := g.max.Load()
		if n <= m || g.max.CompareAndSwap(m, n) {
			return n
		}
	}
}

// Leave records that one holder is about to release.
func (g *Gauge) Leave() { g.n.Add(-1) }

// Now is the number of holders at this moment.
func (g *Gauge) Now() int64 { return g.n.Load() }

// Max is the most holders seen at once.
func (g *Gauge) Max() int64 { return g.max.Load() }

// modeWorkers opens n workers of sys that can take shared claims.
func modeWorkers(ctx context.Context, sys systems.System, n int) ([]systems.ModeWorker, func(), error) {
	ws, closeAll, err := openWorkers(ctx, sys, n)
	if err != nil {
		return nil, nil, err
	}
	out := make([]systems.ModeWorker, len(ws))
	for i, w := range ws {
		mw, ok := w.(systems.ModeWorker)
		if !ok {
			closeAll()
			return nil, nil, fmt.Errorf("%s has no shared claims", sys.Name())
		}
		out[i] = mw
	}
	return out, closeAll, nil
}

// CycleResult is a workload of acquire → release cycles on one name in
// one mode.
type CycleResult struct {
	// Cycles summarises full cycles (Acquire call to Release's return);
	// its PerSec is cycles/s over all workers.
	Cycles stats.Summary `json:"cycles"`
	// MaxHolders is the most claims that certainly held the name at once
	// (see Gauge); Limit what the mode allows (0: no bound).
	MaxHolders int `json:"max_holders"`
	Limit      int `json:"limit,omitempty"`
}

// Over reports whether more claims held at once than the mode allows.
func (r CycleResult) Over() bool { return r.Limit > 0 && r.MaxHolders > r.Limit }

// ErrOverLimit is returned when a workload saw more holders than allowed.
var ErrOverLimit = errors.New("more holders at once than the lock allows")

// ModeCycles runs workers that loop acquire (in mode m) → hold for hold →
// release on one name for d: with m shared, the shared-lock throughput;
// with m.Limit, a semaphore's. Every worker counts itself in a Gauge while
// it holds; the error wraps ErrOverLimit when more than m.Limit held at
// once. A hold above zero gives the count holders to see: with none, the
// window between grant and release is too short to catch much.
func ModeCycles(ctx context.Context, sys systems.System, workers int, d, hold time.Duration, name string, m systems.Mode) (CycleResult, error) {
	ws, closeAll, err := modeWorkers(ctx, sys, workers)
	if err != nil {
		return CycleResult{}, err
	}
	defer closeAll()

	ctx, cancel := context.WithTimeout(ctx, d+grace)
	defer cancel()
	var g Gauge
	c := runCycles(ctx, len(ws), d, func(i, _ int) error {
		h, err := ws[i].AcquireMode(ctx, name, m)
		if errors.Is(err, systems.ErrNoSemaphore) {
			return fmt.Errorf("%w: %w", errStopWorker, err)
		}
		if err != nil {
			return err
		}
		g.Enter()
		if hold > 0 {
			time.Sleep(hold)
		}
		g.Leave()
		return h.Release()
	})
	cyc, err := c.summary()
	r := CycleResult{Cycles: cyc, MaxHolders: int(g.Max()), Limit: m.Limit}
	if r.Over() {
		return r, fmt.Errorf("%w: %d held %q at once, the limit is %d", ErrOverLimit, r.MaxHolders, name, r.Limit)
	}
	return r, err
}

// RWResult is the readers/writer handoff: phases of R readers holding a
// name shared while one writer waits for it exclusively.
type RWResult struct {
	Readers int `json:"readers"`
	// Handoff summarises, per phase, the time from the last reader's
	// Release call to the writer's grant; its PerSec is phases/s.
	Handoff stats.Summary `json:"handoff"`
	// Settle is how long the writer was given to queue before the readers
	// began to release.
	Settle time.Duration `json:"settle_ns"`
	// Overlaps counts writer grants while a reader certainly held, and
	// phases in which the writer was granted before the readers released.
	Overlaps int `json:"overlaps"`
}

// HandoffFrom is the time from the last of the readers' release calls
// (monotonic offsets) to the writer's grant; ok is false when the grant
// came first, which a correct lock never allows.
func HandoffFrom(releases []int64, grant int64) (time.Duration, bool) {
	if len(releases) == 0 {
		return 0, false
	}
	last := releases[0]
	for _, r := range releases[1:] {
		last = max(last, r)
	}
	if grant < last {
		return 0, false
	}
	return time.Duration(grant - last), true
}

// RWHandoff runs phases for d: readers workers take name shared (all at
// once), one more worker then asks for it exclusively and is given settle
// to queue, the readers release one after another, and the writer's grant
// ends the phase; the writer releases before the next one. The error wraps
// ErrOverLimit when the writer was ever granted beside a reader.
func RWHandoff(ctx context.Context, sys systems.System, readers int, d, settle time.Duration, name string) (RWResult, error) {
	ws, closeAll, err := modeWorkers(ctx, sys, readers+1)
	if err != nil {
		return RWResult{}, err
	}
	defer closeAll()
	rs, writer := ws[:readers], ws[readers]

	ctx, cancel := context.WithTimeout(ctx, d+grace)
	defer cancel()
	base := time.Now()
	now := func() int64 { return int64(time.Since(base)) }
	res := RWResult{Readers: readers, Settle: settle}
	var (
		g        Gauge
		samples  []time.Duration
		errs     int
		firstErr error
	)
	fail := func(err error) {
		errs++
		if firstErr == nil {
			firstErr = err
		}
	}
	type grant struct {
		h      systems.Held
		at     int64
		err    error
		beside bool // granted while a reader certainly held
	}
	held := make([]systems.Held, readers)
	acqErr := make([]error, readers)
	releases := make([]int64, readers)
	end := base.Add(d)
	for time.Now().Before(end) && errs < maxErrors && ctx.Err() == nil {
		var wg sync.WaitGroup
		for i, r := range rs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				held[i], acqErr[i] = r.AcquireMode(ctx, name, systems.Mode{Shared: true})
				if acqErr[i] == nil {
					g.Enter()
				}
			}()
		}
		wg.Wait()
		failed := false
		for i := range rs {
			if acqErr[i] != nil {
				fail(acqErr[i])
				failed = true
			}
		}
		if failed {
			for i := range rs {
				if acqErr[i] == nil {
					g.Leave()
					_ = held[i].Release()
				}
			}
			continue
		}
		granted := make(chan grant, 1)
		go func() {
			h, err := writer.AcquireMode(ctx, name, systems.Exclusive)
			at := now()
			granted <- grant{h, at, err, err == nil && g.Now() > 0}
		}()
		time.Sleep(settle)
		for i := range rs {
			g.Leave()
			releases[i] = now()
			if err := held[i].Release(); err != nil {
				fail(err)
			}
		}
		w := <-granted
		if w.err != nil {
			fail(w.err)
			continue
		}
		if lat, ok := HandoffFrom(releases, w.at); ok && !w.beside {
			samples = append(samples, lat)
		} else {
			res.Overlaps++
		}
		if err := w.h.Release(); err != nil {
			fail(err)
		}
	}
	res.Handoff = stats.Summarise(samples, time.Since(base), errs)
	if res.Overlaps > 0 {
		return res, fmt.Errorf("%w: the writer was granted %q beside a reader %d times", ErrOverLimit, name, res.Overlaps)
	}
	if len(samples) == 0 && firstErr != nil {
		return res, firstErr
	}
	return res, nil
}
