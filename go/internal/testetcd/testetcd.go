// Package testetcd runs a real etcd for tests, one member (Start) or a
// cluster (StartCluster) that tests can kill and restart: Debian's
// etcd-server package, on free loopback ports, in a temporary directory.
// It is testing.T's face of go/testkit/cell, which launches the members
// for the tests, the chaos harness, the benchmark and mage ha alike.
package testetcd

import (
	"testing"
	"time"

	"github.com/monolock/monolock/go/testkit/cell"
)

// startWait bounds a new cluster's start, from the first member's start to
// every member's first linearizable read.
const startWait = 30 * time.Second

// Start runs a one-member etcd until the test ends and returns its client
// endpoint, once it serves reads. A machine without etcd fails the test
// with the command that installs it.
func Start(t *testing.T) string {
	t.Helper()
	return StartCluster(t, ClusterOptions{Members: 1}).Endpoint(0)
}

// FreePort returns a loopback address that nothing listens on right now
// and that no other caller in this test binary was given.
func FreePort(t testing.TB) string {
	t.Helper()
	addr, err := cell.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}
