package overlap

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const ms = time.Millisecond

func TestOverlapIsALastMinusBFirst(t *testing.T) {
	for _, c := range []struct {
		name string
		a, b string
		want time.Duration
	}{
		{"A still appending after B started",
			"# pid 10\n1000000000\n1002000000\n1250000000\n", "# pid 11\n1200000000\n1202000000\n", 50 * ms},
		{"B started after A stopped",
			"# pid 10\n1000000000\n1100000000\n", "# pid 11\n1400000000\n1402000000\n# end\n", -300 * ms},
		// A's setsid parent and its grandchild both write their pid; only
		// the grandchild appends.
		{"pid lines and the end line are not appends",
			"# pid 10\n# pid 12\n1000000000\n1500000000\n# end\n", "# pid 11\n1500000000\n", 0},
		{"the extremes count, not the order of the lines",
			"# pid 10\n1300000000\n1100000000\n", "# pid 11\n1250000000\n1200000000\n", 100 * ms},
		// A SIGKILL can cut the last write short: it is not an append.
		{"a last line without its newline is ignored",
			"# pid 10\n1000000000\n1100000000\n19999", "1300000000\n", -200 * ms},
	} {
		got, err := Overlap([]byte(c.a), []byte(c.b))
		if err != nil || got != c.want {
			t.Errorf("%s: Overlap = %v, %v; want %v", c.name, got, err, c.want)
		}
	}
}

func TestOverlapNeedsAnAppendOnEachSide(t *testing.T) {
	if _, err := Overlap([]byte("1000\n"), []byte("# pid 4\n")); !errors.Is(err, ErrNoAppend) || !strings.HasPrefix(err.Error(), "B:") {
		t.Errorf("B without an append: %v", err)
	}
	if _, err := Overlap([]byte("# pid 3\n1000"), []byte("1000\n")); !errors.Is(err, ErrNoAppend) || !strings.HasPrefix(err.Error(), "A:") {
		t.Errorf("A with only a cut-short append: %v", err)
	}
	if _, err := Overlap([]byte("10x\n"), []byte("1000\n")); err == nil {
		t.Error("a malformed append was accepted")
	}
}

func TestParseTellsPIDsAndTheEnd(t *testing.T) {
	a, err := Parse([]byte("# pid 10\n# pid 12\n5\n7\n# end\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a.N != 2 || a.First != 5 || a.Last != 7 || !a.Ended || len(a.PIDs) != 2 || a.PIDs[0] != 10 || a.PIDs[1] != 12 {
		t.Fatalf("Parse = %+v", a)
	}
	if a, _ := Parse([]byte("# pid 10\n5\n")); a.Ended {
		t.Error("a file without the end line ended")
	}
}

func TestSummariseCountsOverlapsAndOrderStatistics(t *testing.T) {
	runs := []Run{
		{ALast: 1500 * ms, BFirst: 1600 * ms, HasB: true, AExit: 79},                 // -100
		{ALast: 9000 * ms, BFirst: 2000 * ms, HasB: true, AEnded: true, AExit: 0},    // +7000
		{ALast: 1580 * ms, BFirst: 1600 * ms, HasB: true, AExit: 79},                 // -20
		{ALast: 1600 * ms, BFirst: 1600 * ms, HasB: true, AExit: 79},                 // 0: not an overlap
		{ALast: 18000 * ms, HasB: false, ARunning: true, AExit: -1},                  // B never started
		{ALast: 12000 * ms, BFirst: 2000 * ms, HasB: true, ARunning: true, AExit: 1}, // +10000
		{Err: "A did not start appending"},
	}
	s := Summarise(runs)
	if s.Runs != 7 || s.Measured != 5 || s.Overlapping != 2 || s.NoB != 1 || s.Failed != 1 || s.FirstErr != "A did not start appending" {
		t.Fatalf("counts: %+v", s)
	}
	if s.Min != -100*ms || s.Median != 0 || s.Max != 10000*ms {
		t.Fatalf("min/median/max = %v/%v/%v", s.Min, s.Median, s.Max)
	}
	if s.ALast != 1600*ms || s.BFirst != 1600*ms {
		t.Fatalf("medians of A's last and B's first = %v, %v", s.ALast, s.BFirst)
	}
	if s.Ended != 1 || s.Running != 2 || s.Exits[79] != 3 || s.Exits[0] != 1 || s.Exits[-1] != 1 || s.Exits[1] != 1 {
		t.Fatalf("ends and exits: %+v", s)
	}
}

func TestMeetsTargetWantsEveryRunAGapOfFivePercent(t *testing.T) {
	lease := 2 * time.Second
	run := func(gap time.Duration) Run { return Run{ALast: time.Second, BFirst: time.Second + gap, HasB: true} }
	if s := Summarise([]Run{run(400 * ms), run(100 * ms)}); !s.MeetsTarget(lease, 0.05) {
		t.Errorf("gaps of 400 and 100 ms (0.05 × 2 s) missed: %+v", s)
	}
	if s := Summarise([]Run{run(400 * ms), run(99 * ms)}); s.MeetsTarget(lease, 0.05) {
		t.Error("a gap of 99 ms met 0.05 × 2 s")
	}
	if s := Summarise([]Run{run(400 * ms), {ALast: time.Second}}); s.MeetsTarget(lease, 0.05) {
		t.Error("a run whose B never started met the target")
	}
	if s := Summarise(nil); s.MeetsTarget(lease, 0.05) {
		t.Error("an empty cell met the target")
	}
}

func TestAppendMainWritesItsPIDAppendsAndEnd(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a")
	t0 := Now()
	if code := AppendMain([]string{"-file", file, "-every", "2ms", "-for", "300ms"}); code != 0 {
		t.Fatalf("exit %d", code)
	}
	t1 := Now()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	a, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.PIDs) != 1 || a.PIDs[0] != os.Getpid() || !a.Ended {
		t.Fatalf("pids %v, ended %v", a.PIDs, a.Ended)
	}
	// It appends again and again until near the end of its 300 ms, within
	// the run. The bounds leave room for a loaded machine, whose sleeps
	// only get longer: a rate is the benchmark's to measure, not a test's.
	if a.N < 2 || a.First < t0 || a.Last > t1 || a.Last-a.First < int64(100*ms) {
		t.Fatalf("%d appends from %d to %d, run from %d to %d", a.N, a.First, a.Last, t0, t1)
	}
	if code := AppendMain([]string{"-file", ""}); code != 2 {
		t.Errorf("no file: exit %d, want 2", code)
	}
}

func TestLookToolRefusesUndeclaredAndNamesThePackage(t *testing.T) {
	if _, err := LookTool("sh"); err == nil || !strings.Contains(err.Error(), "sh is not on ") {
		t.Errorf("sh is not declared, yet: %v", err)
	}
	p, err := LookTool("etcdctl")
	if err == nil {
		if filepath.Base(p) != "etcdctl" {
			t.Errorf("etcdctl at %s", p)
		}
		return
	}
	want := "etcdctl is not installed (Debian package etcd-client): run bash bench/scripts/peers.sh install (apt-get install etcd-client)"
	if err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}
