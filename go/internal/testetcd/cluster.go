package testetcd

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/monolock/monolock/go/internal/testtools"
	"github.com/monolock/monolock/go/testkit/cell"
)

// ClusterOptions configures StartCluster: cell.EtcdOptions without the
// directory (the test's own) and the binary (scripts/system-tools.tsv's).
type ClusterOptions struct {
	// Members is the number of etcd members; 0 means 3.
	Members int
	// Netns, ClientHost and BasePort are cell.EtcdOptions': a namespace
	// to run the members in, the host they listen on for clients, fixed
	// ports.
	Netns      string
	ClientHost string
	BasePort   int
}

// Cluster is a real multi-member etcd (cell.Etcd) whose failures fail the
// test.
type Cluster struct {
	*cell.Etcd // Len, Endpoint, Endpoints, Kill
	t          testing.TB
}

// StartCluster starts the members, waits until every one of them answers a
// health check (so a leader is elected), and stops them when the test ends,
// logging the tail of each member's log if the test failed.
func StartCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	o := cell.EtcdOptions{Dir: t.TempDir(), Members: opts.Members, Bin: testtools.Require(t, "etcd"),
		Netns: opts.Netns, ClientHost: opts.ClientHost, BasePort: opts.BasePort}
	if o.Netns != "" {
		testtools.Require(t, "ip") // fail the test, naming the package, before the launcher would
	}
	e, err := cell.StartEtcd(context.Background(), o, startWait)
	if err != nil {
		logTails(t, o)
		t.Fatal(err)
	}
	c := &Cluster{Etcd: e, t: t}
	t.Cleanup(func() {
		e.Close()
		if t.Failed() {
			logTails(t, o)
		}
	})
	return c
}

// logTails logs the end of every member's log.
func logTails(t testing.TB, o cell.EtcdOptions) {
	n := o.Members
	if n == 0 {
		n = 3
	}
	for i := range n {
		name := cell.MemberName(i)
		b, _ := os.ReadFile(cell.MemberLog(o.Dir, i))
		t.Logf("etcd %s log (tail):\n%s", name, tail(string(b), 4000))
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// Restart starts a killed member again with its data directory. It does not
// wait: use WaitHealthy.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	if err := c.Etcd.Restart(i); err != nil {
		c.t.Fatal(err)
	}
}

// WaitHealthy waits up to d until every given member serves a
// linearizable read, which needs a leader and a quorum.
func (c *Cluster) WaitHealthy(d time.Duration, members ...int) {
	c.t.Helper()
	if err := c.Etcd.WaitHealthy(context.Background(), d, members...); err != nil {
		c.t.Fatal(err)
	}
}

// Leader returns the index of the member that is etcd's raft leader now,
// as the running members report it.
func (c *Cluster) Leader() int {
	c.t.Helper()
	i, err := c.Etcd.Leader(context.Background())
	if err != nil {
		c.t.Fatal(err)
	}
	return i
}
