package runner

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/monolock/monolock/conformance/scenario"
)

// scriptClient is a driver written as a shell script.
func scriptClient(name, script string) Client {
	return Client{Name: name, Dir: ".", Run: []string{"sh", "-c", script}}
}

func writeScenario(t *testing.T, dir, name, body string) *scenario.Scenario {
	t.Helper()
	p := filepath.Join(dir, name+".json")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := scenario.LoadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const ready = `echo '{"event":"ready","client":"sh","capabilities":[]}'`

// The runner must survive every way a driver can misbehave and classify it:
// a hang is a timeout, bad output is an error, a wrong event is a failure.
func TestRunOneClassifiesDriverMisbehaviour(t *testing.T) {
	dir := t.TempDir()
	empty := writeScenario(t, dir, "empty", `{"description": "nothing", "backend": "fake", "steps": [{"op": "pause", "ms": 200}]}`)
	expect := writeScenario(t, dir, "expect", `{"description": "one refusal", "backend": "fake", "steps": [
		{"op": "acquire", "id": "a", "name": "", "lease_ms": 1000, "mode": "wait"},
		{"op": "expect", "id": "a", "event": "error", "within_ms": 500, "fields": {"kind": "validation", "code": 20}}]}`)
	needsCancel := writeScenario(t, dir, "cancel", `{"description": "needs cancel", "backend": "fake", "requires": ["cancel"], "steps": []}`)
	opt := Options{Root: dir, StartTimeout: time.Second, QuitGrace: 300 * time.Millisecond}

	// Answers the acquire with the given event line, then exits on EOF.
	answering := func(line string) string {
		return ready + `; read cmd; echo '` + line + `'; cat >/dev/null`
	}
	cases := []struct {
		desc   string
		client Client
		sc     *scenario.Scenario
		want   Status
		detail string
	}{
		{"correct", scriptClient("ok", answering(`{"event":"error","id":"a","kind":"validation","code":20,"temporary":false}`)), expect, Pass, ""},
		{"wrong code", scriptClient("code", answering(`{"event":"error","id":"a","kind":"validation","code":21,"temporary":false}`)), expect, Fail, "field code"},
		{"extra event", scriptClient("extra", ready+`; echo '{"event":"waiting","id":"z"}'; cat >/dev/null`), empty, Fail, "unexpected events"},
		{"silent", scriptClient("silent", ready+`; cat >/dev/null`), expect, Fail, "no event"},
		{"no ready", scriptClient("noready", `exec sleep 30`), empty, Timeout, "no ready"},
		{"ignores quit", scriptClient("stuck", ready+`; exec sleep 30 </dev/null`), empty, Timeout, "did not exit"},
		{"garbage", scriptClient("garbage", answering(`not json`)), expect, Error, "not a JSON object"},
		{"driver_error", scriptClient("drverr", answering(`{"event":"driver_error","message":"huh"}`)), expect, Error, "driver_error"},
		{"crash", scriptClient("crash", ready+`; exit 3`), expect, Error, "exited before quit"},
		{"bad exit", scriptClient("badexit", ready+`; cat >/dev/null; exit 3`), empty, Error, "after quit"},
		{"capability", scriptClient("nocap", ready+`; cat >/dev/null`), needsCancel, NA, "cancel"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			t0 := time.Now()
			res := RunOne(context.Background(), tc.client, tc.sc, opt)
			if res.Status != tc.want || !strings.Contains(res.Detail, tc.detail) {
				t.Fatalf("got %s %q, want %s containing %q", res.Status, res.Detail, tc.want, tc.detail)
			}
			if el := time.Since(t0); el > 5*time.Second {
				t.Fatalf("took %v: the runner must not hang on a driver", el)
			}
		})
	}
}

func TestRunMatrixAppliesFailureLists(t *testing.T) {
	dir := t.TempDir()
	pass := writeScenario(t, dir, "passes", `{"description": "passes", "backend": "fake", "steps": []}`)
	fail := writeScenario(t, dir, "fails", `{"description": "fails", "backend": "fake", "steps": [
		{"op": "acquire", "id": "a", "name": "", "lease_ms": 1000, "mode": "wait"},
		{"op": "expect", "id": "a", "event": "error", "within_ms": 200}]}`)
	fdir := filepath.Join(dir, "failures")
	if err := os.MkdirAll(fdir, 0o755); err != nil {
		t.Fatal(err)
	}
	client := scriptClient("c", ready+`; cat >/dev/null`)
	run := func(list string) Matrix {
		if err := os.WriteFile(filepath.Join(fdir, "c.txt"), []byte(list), 0o644); err != nil {
			t.Fatal(err)
		}
		return RunMatrix(context.Background(), []Client{client}, []*scenario.Scenario{pass, fail},
			MatrixOptions{Options: Options{Root: dir, QuitGrace: time.Second}, FailuresDir: fdir, Parallel: 2})
	}

	m := run("")
	if r, _ := m.Get("c", "fails"); r.Status != Fail || m.Unexpected != 1 {
		t.Fatalf("unlisted failure: %s, %d unexpected", r.Status, m.Unexpected)
	}
	m = run("# known\nfails  # the driver cannot answer yet\n")
	if r, _ := m.Get("c", "fails"); r.Status != XFail || m.Unexpected != 0 {
		t.Fatalf("listed failure: %s, %d unexpected", r.Status, m.Unexpected)
	}
	m = run("fails\npasses\n")
	if r, _ := m.Get("c", "passes"); r.Status != XPass || m.Unexpected != 1 {
		t.Fatalf("listed pass: %s, %d unexpected", r.Status, m.Unexpected)
	}
	var out strings.Builder
	m.WriteTable(&out)
	if !strings.Contains(out.String(), "XPASS") || !strings.Contains(out.String(), "xfail") {
		t.Fatalf("table:\n%s", out.String())
	}
}

func TestExpectedInterval(t *testing.T) {
	for _, c := range []struct{ lease, rtt, want float64 }{
		{400, 0, 100},   // base interval
		{800, 60, 80},   // base - 2*rtt
		{400, 150, 150}, // clamped to 1 ms, so paced by the acks
		{1000, 100, 100},
	} {
		if got := ExpectedInterval(c.lease, c.rtt); got != c.want {
			t.Errorf("ExpectedInterval(%v, %v) = %v, want %v", c.lease, c.rtt, got, c.want)
		}
	}
}

// A miss that passes on rerun is flaky: reported, but not a failure of the
// run; a miss that misses again stays a miss.
func TestRunMatrixRerunsMisses(t *testing.T) {
	dir := t.TempDir()
	sc := writeScenario(t, dir, "refusal", `{"description": "one refusal", "backend": "fake", "steps": [
		{"op": "acquire", "id": "a", "name": "", "lease_ms": 1000, "mode": "wait"},
		{"op": "expect", "id": "a", "event": "error", "within_ms": 300, "fields": {"kind": "validation", "code": 20}}]}`)
	answer := `{"event":"error","id":"a","kind":"validation","code":20,"temporary":false}`
	// Silent on the first run (the marker file does not exist yet), right after.
	flaky := scriptClient("flaky", ready+`; read cmd; if [ -e seen ]; then echo '`+answer+`'; else touch seen; fi; cat >/dev/null`)
	broken := scriptClient("broken", ready+`; cat >/dev/null`)
	opt := MatrixOptions{Options: Options{Root: dir, QuitGrace: time.Second}, Parallel: 2, Rerun: 1}

	m := RunMatrix(context.Background(), []Client{flaky, broken}, []*scenario.Scenario{sc}, opt)
	if r, _ := m.Get("flaky", "refusal"); r.Status != Pass || !r.Flaky || !strings.Contains(r.Detail, "first attempt") {
		t.Fatalf("flaky: %+v", r)
	}
	if r, _ := m.Get("broken", "refusal"); r.Status != Fail || r.Flaky {
		t.Fatalf("broken: %+v", r)
	}
	if m.Unexpected != 1 {
		t.Fatalf("%d unexpected, want 1 (the broken one)", m.Unexpected)
	}
	var out strings.Builder
	m.WriteTable(&out)
	if !strings.Contains(out.String(), "ok~") {
		t.Fatalf("table:\n%s", out.String())
	}
}

// A safety scenario is never rerun: the same flaky client that passes an
// ordinary scenario on rerun fails it.
func TestRunMatrixNeverRerunsSafety(t *testing.T) {
	dir := t.TempDir()
	sc := writeScenario(t, dir, "refusal", `{"description": "one refusal", "class": "safety", "backend": "fake", "steps": [
		{"op": "acquire", "id": "a", "name": "", "lease_ms": 1000, "mode": "wait"},
		{"op": "expect", "id": "a", "event": "error", "within_ms": 300, "fields": {"kind": "validation", "code": 20}}]}`)
	answer := `{"event":"error","id":"a","kind":"validation","code":20,"temporary":false}`
	flaky := scriptClient("flaky", ready+`; read cmd; if [ -e seen ]; then echo '`+answer+`'; else touch seen; fi; cat >/dev/null`)
	opt := MatrixOptions{Options: Options{Root: dir, QuitGrace: time.Second}, Parallel: 1, Rerun: 3}

	m := RunMatrix(context.Background(), []Client{flaky}, []*scenario.Scenario{sc}, opt)
	if r, _ := m.Get("flaky", "refusal"); r.Status != Fail || r.Flaky {
		t.Fatalf("safety scenario: %+v, want a plain fail", r)
	}
	if m.Unexpected != 1 {
		t.Fatalf("%d unexpected, want 1", m.Unexpected)
	}
}
