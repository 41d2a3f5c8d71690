package launch

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// sh runs script as a stand-in server; its last argument is the ready
// file's path (Start appends --ready-file PATH).
func sh(script string) *exec.Cmd {
	return exec.Command("sh", "-c", `for a; do f=$a; done; `+script, "sh")
}

func TestStartReadsTheReadyFile(t *testing.T) {
	s, err := Start(context.Background(), sh(`printf '{"lock_addr":"127.0.0.1:5","admin_addr":"","pid":%d,"version":"v"}' $$ > "$f.tmp" && mv "$f.tmp" "$f"; exec sleep 60`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.LockAddr != "127.0.0.1:5" || s.PID() != s.Ready.PID || s.Version != "v" {
		t.Errorf("got %+v, pid %d", s.Ready, s.PID())
	}
	if err := s.Stop(); err != nil {
		t.Error(err)
	}
}

func TestStartFailsWithStderrWhenTheServerExits(t *testing.T) {
	_, err := Start(context.Background(), sh(`echo "bad flag" >&2; exit 2`), Options{})
	if err == nil || !strings.Contains(err.Error(), "exited before it was ready") || !strings.Contains(err.Error(), "bad flag") {
		t.Fatalf("got %v", err)
	}
}

func TestStartTimesOutAndKills(t *testing.T) {
	_, err := Start(context.Background(), sh(`echo "still starting" >&2; exec sleep 60`), Options{Wait: 200 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "not ready within") || !strings.Contains(err.Error(), "still starting") {
		t.Fatalf("got %v", err)
	}
}

func TestStopKillsAfterTheGrace(t *testing.T) {
	s, err := Start(context.Background(), sh(`trap '' TERM; echo '{"lock_addr":"127.0.0.1:5"}' > "$f"; while :; do sleep 1; done`),
		Options{StopGrace: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err == nil {
		t.Error("Stop of a server that ignores SIGTERM gave no error")
	}
}

func TestTailKeepsTheEnd(t *testing.T) {
	var b tailBuffer
	b.Write([]byte(strings.Repeat("x", tailSize)))
	b.Write([]byte("end"))
	if got := b.String(); len(got) != tailSize || !strings.HasSuffix(got, "end") {
		t.Errorf("len %d, suffix %q", len(got), got[len(got)-3:])
	}
}
