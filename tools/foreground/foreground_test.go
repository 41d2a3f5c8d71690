package foreground

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestParentAndCommandName(t *testing.T) {
	ppid, ok := parentOf(os.Getpid())
	if !ok || ppid != os.Getppid() {
		t.Fatalf("parentOf(self) = %d, %v; want %d", ppid, ok, os.Getppid())
	}
	if _, ok := parentOf(1 << 30); ok {
		t.Fatal("a pid that does not exist has a parent")
	}
	name := commandName(os.Getpid())
	if !strings.HasPrefix(os.Args[0][strings.LastIndexByte(os.Args[0], '/')+1:], name) {
		t.Fatalf("commandName(self) = %q, args[0] %q", name, os.Args[0])
	}
}

// A command that ends on its own ends Run with its status; an interrupted
// target stops its command with SIGTERM, which a well-behaved one obeys.
func TestRunStopsTheCommandWhenTheTargetEnds(t *testing.T) {
	if err := Run(context.Background(), exec.Command("true"), "true", time.Second); err != nil {
		t.Fatalf("true: %v", err)
	}
	if err := Run(context.Background(), exec.Command("false"), "false", time.Second); err == nil {
		t.Fatal("false: no error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	err := Run(ctx, exec.Command("sleep", "60"), "sleep", 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "terminated") {
		t.Fatalf("sleep after the cancel: %v; want it ended by SIGTERM", err)
	}
	if time.Since(start) > 9*time.Second {
		t.Fatal("the command was not stopped by SIGTERM")
	}
	// One that ignores SIGTERM is killed after the grace.
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	err = Run(ctx, exec.Command("sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"), "stubborn", 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "did not stop within") {
		t.Fatalf("a command that ignores SIGTERM: %v", err)
	}
}
