// Package testetcd runs a real etcd for tests, one member (Start) or a
// cluster (StartCluster) that tests can kill and restart: Debian's
// etcd-server package, on free loopback ports, in a temporary directory.
package testetcd

import (
	"fmt"
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/monolock/monolock/go/internal/testtools"
)

// Start runs etcd until the test ends and returns its client endpoint. A
// machine without etcd fails the test with the command that installs it.
func Start(t *testing.T) string {
	t.Helper()
	bin := testtools.Require(t, "etcd")
	client, peer := FreePort(t), FreePort(t)
	clientURL, peerURL := "http://"+client, "http://"+peer
	cmd := exec.Command(bin,
		"--name", "test", "--data-dir", t.TempDir(),
		"--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "test="+peerURL, "--initial-cluster-state", "new",
		"--log-level", "warn")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", client, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd did not listen on %s: %v", client, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return client
}

// FreePort returns a loopback address that nothing listens on right now.
func FreePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return fmt.Sprint(ln.Addr())
}
