package workload

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/monolock/monolock/bench/internal/systems"
)

func TestGaugeCountsHoldersAndKeepsTheMost(t *testing.T) {
	var g Gauge
	if g.Enter() != 1 || g.Enter() != 2 || g.Enter() != 3 {
		t.Fatal("Enter does not return the count including the new holder")
	}
	g.Leave()
	g.Leave()
	if g.Enter() != 2 {
		t.Fatal("Enter after two Leaves")
	}
	if g.Now() != 2 || g.Max() != 3 {
		t.Fatalf("now %d max %d, want 2 and 3", g.Now(), g.Max())
	}
}

func TestHandoffFromIsMeasuredFromTheLastRelease(t *testing.T) {
	lat, ok := HandoffFrom([]int64{100, 400, 250}, 1000)
	if !ok || lat != 600 {
		t.Fatalf("got %v %v, want 600ns", lat, ok)
	}
	if _, ok := HandoffFrom([]int64{100, 400}, 300); ok {
		t.Fatal("a grant before the last release must not count as a handoff")
	}
	if _, ok := HandoffFrom(nil, 300); ok {
		t.Fatal("no readers, no handoff")
	}
}

// fakeLock is an in-process lock with the server's rules: shared claims
// together (at most limit of them when limit > 0), exclusive alone.
// ignoreLimits makes it grant everything, to show the checks catch it.
type fakeLock struct {
	mu           sync.Mutex
	cond         *sync.Cond
	shared, excl int
	ignoreLimits bool
	noSemaphore  bool
}

func newFake() *fakeLock { f := &fakeLock{}; f.cond = sync.NewCond(&f.mu); return f }

func (f *fakeLock) Name() string                                   { return "fake" }
func (f *fakeLock) Close() error                                   { return nil }
func (f *fakeLock) Worker(context.Context) (systems.Worker, error) { return fakeWorker{f}, nil }

type fakeWorker struct{ f *fakeLock }

func (w fakeWorker) Close() error { return nil }
func (w fakeWorker) Acquire(ctx context.Context, name string) (systems.Held, error) {
	return w.AcquireMode(ctx, name, systems.Exclusive)
}

func (w fakeWorker) AcquireMode(_ context.Context, _ string, m systems.Mode) (systems.Held, error) {
	f := w.f
	if m.Limit > 0 && f.noSemaphore {
		return nil, systems.ErrNoSemaphore
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fits := func() bool {
		switch {
		case f.ignoreLimits:
			return true
		case !m.Shared && m.Limit == 0:
			return f.excl == 0 && f.shared == 0
		case m.Limit > 0:
			return f.excl == 0 && f.shared < m.Limit
		}
		return f.excl == 0
	}
	for !fits() {
		f.cond.Wait()
	}
	shared := m.Shared || m.Limit > 0
	if shared {
		f.shared++
	} else {
		f.excl++
	}
	return fakeHeld{f, shared}, nil
}

type fakeHeld struct {
	f      *fakeLock
	shared bool
}

func (h fakeHeld) Release() error {
	h.f.mu.Lock()
	if h.shared {
		h.f.shared--
	} else {
		h.f.excl--
	}
	h.f.mu.Unlock()
	h.f.cond.Broadcast()
	return nil
}

func TestSemaphoreCyclesStayWithinTheLimit(t *testing.T) {
	r, err := ModeCycles(context.Background(), newFake(), 8, 150*time.Millisecond, 200*time.Microsecond, "s", systems.Mode{Shared: true, Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if r.Cycles.Count == 0 || r.MaxHolders < 1 || r.MaxHolders > 3 || r.Over() {
		t.Fatalf("cycles %d, max holders %d, limit %d", r.Cycles.Count, r.MaxHolders, r.Limit)
	}
}

func TestSemaphoreCyclesFailWhenMoreHoldThanTheLimit(t *testing.T) {
	f := newFake()
	f.ignoreLimits = true
	r, err := ModeCycles(context.Background(), f, 8, 150*time.Millisecond, time.Millisecond, "s", systems.Mode{Shared: true, Limit: 2})
	if !errors.Is(err, ErrOverLimit) || !r.Over() || r.MaxHolders <= 2 {
		t.Fatalf("err %v, max holders %d: a lock that grants everyone must fail the check", err, r.MaxHolders)
	}
}

func TestSharedCyclesWithoutASemaphoreRecipeStopAtOnce(t *testing.T) {
	f := newFake()
	f.noSemaphore = true
	start := time.Now()
	_, err := ModeCycles(context.Background(), f, 4, 5*time.Second, 0, "s", systems.Mode{Shared: true, Limit: 4})
	if !errors.Is(err, systems.ErrNoSemaphore) || time.Since(start) > time.Second {
		t.Fatalf("err %v after %v", err, time.Since(start))
	}
}

func TestRWHandoffMeasuresEveryPhase(t *testing.T) {
	r, err := RWHandoff(context.Background(), newFake(), 4, 100*time.Millisecond, time.Millisecond, "rw")
	if err != nil {
		t.Fatal(err)
	}
	if r.Handoff.Count == 0 || r.Overlaps != 0 || r.Readers != 4 || r.Handoff.Errors != 0 {
		t.Fatalf("%+v", r)
	}
}

func TestRWHandoffFailsWhenTheWriterJoinsTheReaders(t *testing.T) {
	f := newFake()
	f.ignoreLimits = true
	r, err := RWHandoff(context.Background(), f, 2, 50*time.Millisecond, time.Millisecond, "rw")
	if !errors.Is(err, ErrOverLimit) || r.Overlaps == 0 {
		t.Fatalf("err %v, overlaps %d", err, r.Overlaps)
	}
}
