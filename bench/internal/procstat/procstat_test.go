package procstat

import (
	"net"
	"os"
	"testing"
)

func TestSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc on this system")
	}
	pid := os.Getpid()
	if m := Memory(pid); m <= 0 {
		t.Fatalf("memory %d", m)
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
