package procstat

import (
	"net"
	"os"
	"os/exec"
	"testing"
	"time"
)

func TestSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc on this system")
	}
	pid := os.Getpid()
	if m := Memory(pid); m <= 0 {
		t.Fatalf("memory %d", m)
	}
	if m := RSS(pid); m <= 0 || m%1024 != 0 {
		t.Fatalf("VmRSS %d bytes, want a positive number of KiB", m)
	}
	if m := RSS(1 << 30); m != 0 {
		t.Fatalf("VmRSS of no process: %d", m)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got, err := ListenerPID(ln.Addr().(*net.TCPAddr).Port)
	if err != nil || got != pid {
		t.Fatalf("ListenerPID = %d, %v; want %d", got, err, pid)
	}
	for i := 0; CPU(pid) == 0 && i < 1e8; i++ {
	}
	if CPU(pid) <= 0 {
		t.Fatal("no CPU time accounted")
	}
}

// A child's CPU time counts in its parent's tree, not in the parent's own.
func TestOwnCPULeavesChildrenOut(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc on this system")
	}
	child := exec.Command("sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; sleep 30")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	self := os.Getpid()
	deadline := time.Now().Add(20 * time.Second)
	for OwnCPU(child.Process.Pid) < 200*time.Millisecond && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	childCPU := OwnCPU(child.Process.Pid)
	if childCPU < 200*time.Millisecond {
		t.Fatalf("child used only %v", childCPU)
	}
	// Own first, the tree after: this process's own time only grows in
	// between (the race detector, the GC), so tree - own can only
	// overstate the child's part, never understate it. The other order
	// failed once on a loaded machine (tree 280ms - own 70ms < child 220ms).
	own := OwnCPU(self)
	if tree := CPU(self); tree-own < childCPU {
		t.Fatalf("tree %v - own %v < child %v", tree, own, childCPU)
	}
}
