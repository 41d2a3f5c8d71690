package report

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/monolock/monolock/bench/internal/stats"
	"github.com/monolock/monolock/bench/internal/workload"
)

func sharedSample() *SharedSection {
	cyc := func(perSec float64, holders, limit int) workload.CycleResult {
		return workload.CycleResult{Cycles: stats.Summary{Count: 100, PerSec: perSec, P50: time.Millisecond, P99: 3 * time.Millisecond}, MaxHolders: holders, Limit: limit}
	}
	rw := func(readers int, p50 time.Duration) workload.RWResult {
		return workload.RWResult{Readers: readers, Settle: 2 * time.Millisecond, Handoff: stats.Summary{Count: 50, PerSec: 200, P50: p50, P99: 2 * p50, Max: 3 * p50}}
	}
	return &SharedSection{
		Throughput: []ModeCell{
			{System: "monolock", Workers: 1, Result: cyc(3000, 1, 0)}, {System: "postgres", Workers: 1, Result: cyc(6000, 1, 0)},
			{System: "monolock", Workers: 16, Result: cyc(8000, 16, 0)}, {System: "postgres", Workers: 16, Result: cyc(4000, 16, 0)},
		},
		RW: []RWCell{
			{System: "monolock", Result: rw(16, 100*time.Microsecond)}, {System: "postgres", Result: rw(16, 300*time.Microsecond)},
		},
		Semaphore: []ModeCell{{System: "monolock", Workers: 16, Result: cyc(5000, 4, 4)}},
		Hold:      200 * time.Microsecond,
	}
}

func TestSharedSectionTablesAndRatios(t *testing.T) {
	r := sample()
	r.Shared = sharedSample()
	var b bytes.Buffer
	writeShared(&b, r)
	md := b.String()
	for _, want := range []string{
		"## 9. Shared locks and semaphores",
		"| postgres | 1 | 6000 | 1.00 ms | 3.00 ms | 0.50× | 0 |",
		"| postgres | 16 | 4000 | 1.00 ms | 3.00 ms | 2.00× | 0 |",
		"| postgres | 16 | 200 | 300 µs | 600 µs | 900 µs | 3.00× | 0 | 0 |",
		"| monolock | 16 | 4 | 5000 | 1.00 ms | 3.00 ms | 4 | never above the limit | 0 |",
		"PostgreSQL has no semaphore",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("missing %q in\n%s", want, md)
		}
	}
	if strings.Contains(md, "run of its own") {
		t.Error("a section of the run itself is not separate")
	}
	if !strings.Contains(string(markdown(r, nil, "")), "## 9. Shared locks and semaphores") {
		t.Error("the report leaves the section out")
	}
}

func TestSharedSectionSaysWhenALimitWasPassed(t *testing.T) {
	r := sample()
	r.Shared = sharedSample()
	r.Shared.Semaphore[0].Result.MaxHolders = 5
	var b bytes.Buffer
	writeShared(&b, r)
	if !strings.Contains(b.String(), "| 5 | **above the limit** |") {
		t.Error(b.String())
	}
}

func TestMergeSharedKeepsThePartsNotRerun(t *testing.T) {
	old := sharedSample()
	next := &SharedSection{Semaphore: []ModeCell{{System: "monolock", Workers: 16}}, Hold: time.Millisecond, SeparateRun: SeparateRun{Command: "again"}}
	m := MergeShared(old, next)
	if !m.Separate || m.Command != "again" || len(m.Throughput) != 4 || len(m.RW) != 2 || m.Hold != time.Millisecond || m.Semaphore[0].Result.Limit != 0 {
		t.Fatalf("%+v", m)
	}
	if MergeShared(old, nil) != old {
		t.Fatal("nothing measured, nothing merged")
	}
	if m := MergeShared(nil, next); !m.Separate || len(m.Semaphore) != 1 {
		t.Fatalf("%+v", m)
	}
}
