package report

import (
	"strings"
	"testing"
	"time"

	"github.com/monolock/monolock/bench/internal/workload"
)

// heldRun is a held section of 100 × 1,000 locks: 60 MiB of growth
// (629 B per lock) and 0.75 s of CPU over 15 s (0.05 cores, at the
// target, so missed).
func heldRun() *HeldSection {
	return &HeldSection{Result: workload.HeldResult{
		Config: workload.HeldConfig{Sessions: 100, Claims: 1000, Lease: 10 * time.Second, Window: 15 * time.Second, Settle: 3500 * time.Millisecond},
		Held:   100000, Setup: 4 * time.Second,
		RSSBefore: 10 << 20, RSSHeld: 69 << 20, RSSAfter: 70 << 20, BytesPerLock: 60 * (1 << 20) / 100000.0,
		CPU: 750 * time.Millisecond, Window: 15 * time.Second, CPUCores: 0.05,
	}}
}

func TestHeldSectionAndTargets(t *testing.T) {
	r := sample()
	r.Held = heldRun()
	text := string(markdown(r, nil, ""))
	for _, want := range []string{
		"| 100,000 held locks on one server (sessions × claims) | 100 × 1000 asked, 100000 held, 0 lost | met |",
		"| server memory per held lock under 1 KiB | 629 B per lock at 100,000 locks (VmRSS 10.0 MiB → 70.0 MiB) | met |",
		"| heartbeats of 100 sessions holding 100,000 locks under 0.05 of a core | 0.0500 cores (750.0 ms of CPU over 15.00 s) | **missed** |",
		"## 11. Held locks on sessions",
		"| 100 × 1000 | 100000 | 4.00 s | 10.0 MiB | 69.0 MiB | 70.0 MiB | 629 B | 0.0500 | 0 |  |",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	rows := table(t, text, "| sessions × claims | held |")
	if len(rows) != 3 || strings.Count(rows[2], "|") != strings.Count(rows[0], "|") {
		t.Errorf("held table %q", rows)
	}
}

// A smoke-sized run meets no count target, and one that lost a lock or
// failed half-way is not held to the memory and CPU targets.
func TestHeldTargetsOfShortRuns(t *testing.T) {
	r := sample()
	h := heldRun()
	h.Result.Config.Sessions, h.Result.Held = 10, 10000
	r.Held = h
	text := string(markdown(r, nil, ""))
	if !strings.Contains(text, "| 100,000 held locks on one server (sessions × claims) | 10 × 1000 asked, 10000 held, 0 lost | **missed** |") {
		t.Error("a run of 10k locks meets the 100k target")
	}
	if !strings.Contains(text, "| server memory per held lock under 1 KiB | 629 B per lock at 10,000 locks") || !strings.Contains(text, "| met |") {
		t.Error("the memory target of a complete smaller run is not judged on its figure")
	}
	h.Err, h.Result.Held = "session 3, claim 7: refused", 3007
	text = string(markdown(r, nil, ""))
	for _, want := range []string{
		"| 100,000 held locks on one server (sessions × claims) | 10 × 1000 asked, 3007 held, 0 lost: session 3, claim 7: refused | **missed** |",
		"| server memory per held lock under 1 KiB | 629 B per lock at 3,007 locks (VmRSS 10.0 MiB → 70.0 MiB) | **missed** |",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	r.Held = &HeldSection{Err: "starting the server: no binary"}
	text = string(markdown(r, nil, ""))
	if !strings.Contains(text, "Not measured: starting the server: no binary") {
		t.Error("a section that measured nothing does not say why")
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 100000: "100,000", 1234567: "1,234,567", -1000: "-1,000"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}
