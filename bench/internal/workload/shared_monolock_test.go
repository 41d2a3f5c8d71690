package workload

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/monolock/monolock/bench/internal/monoserver"
	"github.com/monolock/monolock/bench/internal/systems"
)

// The shared workloads against a real `monolock serve`, through the Go
// client as the benchmark runs them: shared claims on one name all hold
// together (the readers/writer phases could not start otherwise), a
// semaphore never has more holders than permits, and the writer is never
// granted beside a reader.
func TestSharedWorkloadsOnMonolockServe(t *testing.T) {
	dir := t.TempDir()
	bin, err := monoserver.Build(filepath.Join("..", "..", "..", "go"), dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	srv, err := monoserver.Start(ctx, bin, filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	sys, err := systems.OpenMonolock(srv.Addr, systems.Options{Lease: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}

	sem, err := ModeCycles(ctx, sys, 6, 300*time.Millisecond, time.Millisecond, "sem", systems.Mode{Shared: true, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if sem.Cycles.Count == 0 || sem.Cycles.Errors != 0 || sem.MaxHolders > 2 {
		t.Fatalf("semaphore: %+v", sem)
	}

	rw, err := RWHandoff(ctx, sys, 3, 300*time.Millisecond, 2*time.Millisecond, "rw")
	if err != nil {
		t.Fatal(err)
	}
	if rw.Handoff.Count == 0 || rw.Handoff.Errors != 0 || rw.Overlaps != 0 {
		t.Fatalf("readers/writer: %+v", rw)
	}
}
