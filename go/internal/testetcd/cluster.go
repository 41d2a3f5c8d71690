package testetcd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/monolock/monolock/go/internal/testtools"
)

// ClusterOptions configures StartCluster.
type ClusterOptions struct {
	// Members is the number of etcd members; 0 means 3.
	Members int
	// Netns, when set, names the network namespace (one of `ip netns`,
	// whose loopback must be up) that the members run in; the cluster's
	// own health and status checks dial into it. The members listen on
	// 127.0.0.1 of wherever they run.
	Netns string
	// ClientHost is the host the members listen on for clients: "" means
	// 127.0.0.1; "0.0.0.0" means every address of the namespace they run
	// in, for clients that reach them over a link into that namespace (at
	// the member's port of Endpoint). They advertise 127.0.0.1 either way,
	// and Endpoint and Endpoints name that address.
	ClientHost string
	// BasePort, when set, gives the members fixed ports instead of free
	// ones of the machine's namespace: member i listens for clients on
	// BasePort+2i and for peers on BasePort+2i+1. Use it with Wrap into a
	// network namespace of their own, where nothing else listens; the
	// machine's own ports then play no part (they may run out under load).
	BasePort int
}

// Cluster is a real multi-member etcd, one process per member, each with its
// own data directory, on 127.0.0.1 ports. Members can be killed (kill -9) and
// restarted with their data.
type Cluster struct {
	t       testing.TB
	netns   string
	ip      string // the ip command, when the cluster runs in netns
	host    string // ClientHost
	bin     string
	token   string
	initial string // --initial-cluster
	mu      sync.Mutex
	members []*member
}

type member struct {
	name, client, peer, dir, log string
	cmd                          *exec.Cmd // nil while stopped
	exited                       chan struct{}
	cli                          *clientv3.Client // made on first use, kept across restarts
}

// StartCluster starts the members, waits until every one of them answers a
// health check (so a leader is elected), and stops them when the test ends.
func StartCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	bin := testtools.Require(t, "etcd")
	n := opts.Members
	if n == 0 {
		n = 3
	}
	c := &Cluster{t: t, netns: opts.Netns, host: opts.ClientHost, bin: bin, token: fmt.Sprintf("monolock-test-%d-%d", os.Getpid(), time.Now().UnixNano())}
	if c.netns != "" {
		c.ip = testtools.Require(t, "ip")
	}
	var initial []string
	for i := range n {
		// Fixed ports for a namespace of the cluster's own; otherwise free
		// ones of this network namespace.
		m := &member{name: fmt.Sprintf("m%d", i), dir: t.TempDir()}
		if opts.BasePort != 0 {
			m.client = fmt.Sprintf("127.0.0.1:%d", opts.BasePort+2*i)
			m.peer = fmt.Sprintf("127.0.0.1:%d", opts.BasePort+2*i+1)
		} else {
			m.client, m.peer = FreePort(t), FreePort(t)
		}
		m.log = filepath.Join(m.dir, "etcd.log")
		c.members = append(c.members, m)
		initial = append(initial, m.name+"=http://"+m.peer)
	}
	c.initial = strings.Join(initial, ",")
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, m := range c.members {
			c.stopLocked(m)
			if m.cli != nil {
				_ = m.cli.Close()
			}
		}
		if t.Failed() {
			for _, m := range c.members {
				b, _ := os.ReadFile(m.log)
				t.Logf("etcd %s log (tail):\n%s", m.name, tail(string(b), 4000))
			}
		}
	})
	for i := range c.members {
		c.start(i)
	}
	c.WaitHealthy(30*time.Second, c.all()...)
	return c
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func (c *Cluster) all() []int {
	idx := make([]int, len(c.members))
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// command runs name in the cluster's network namespace, if it has one.
func (c *Cluster) command(name string, args ...string) *exec.Cmd {
	if c.netns == "" {
		return exec.Command(name, args...)
	}
	return exec.Command(c.ip, append([]string{"netns", "exec", c.netns, name}, args...)...)
}

// start runs member i with its data directory: a new member the first time,
// the same member afterwards (etcd ignores the --initial-* flags once its
// data directory holds a member).
func (c *Cluster) start(i int) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.members[i]
	if m.cmd != nil {
		c.t.Fatalf("etcd %s is already running", m.name)
	}
	clientURL, peerURL := "http://"+m.client, "http://"+m.peer
	listenURL := clientURL
	if c.host != "" {
		_, port, _ := net.SplitHostPort(m.client)
		listenURL = "http://" + net.JoinHostPort(c.host, port)
	}
	cmd := c.command(c.bin,
		"--name", m.name, "--data-dir", filepath.Join(m.dir, "data"),
		"--listen-client-urls", listenURL, "--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", c.initial, "--initial-cluster-state", "new",
		"--initial-cluster-token", c.token, "--log-level", "warn")
	logf, err := os.OpenFile(m.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		c.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		c.t.Fatal(err)
	}
	m.cmd, m.exited = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); logf.Close(); close(done) }(m.exited)
}

func (c *Cluster) stopLocked(m *member) {
	if m.cmd == nil {
		return
	}
	_ = m.cmd.Process.Kill()
	<-m.exited
	m.cmd = nil
	if m.cli != nil {
		// A client that saw the member die backs off its reconnects for
		// seconds: the health check of the restarted member dials afresh.
		m.cli.Close()
		m.cli = nil
	}
}

// Len is the number of members.
func (c *Cluster) Len() int { return len(c.members) }

// Endpoint is member i's client address, HOST:PORT.
func (c *Cluster) Endpoint(i int) string { return c.members[i].client }

// Endpoints lists every member's client address, comma-separated, as
// `monolock serve --etcd` takes them.
func (c *Cluster) Endpoints() string {
	eps := make([]string, len(c.members))
	for i, m := range c.members {
		eps[i] = m.client
	}
	return strings.Join(eps, ",")
}

// Kill kills member i with SIGKILL and waits until it is gone.
func (c *Cluster) Kill(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopLocked(c.members[i])
}

// Restart starts a killed member again with its data directory. It does not
// wait: use WaitHealthy.
func (c *Cluster) Restart(i int) { c.t.Helper(); c.start(i) }

// client returns the etcd client of member i, made on first use. It dials
// inside the cluster's network namespace when there is one, so the test
// process reaches members that listen on that namespace's loopback.
func (c *Cluster) client(i int) (*clientv3.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.members[i]
	if m.cli != nil {
		return m.cli, nil
	}
	cfg := clientv3.Config{Endpoints: []string{"http://" + m.client}, Logger: zap.NewNop()}
	if c.netns != "" {
		cfg.DialOptions = []grpc.DialOption{grpc.WithContextDialer(netnsDialer(c.netns))}
	}
	cli, err := clientv3.New(cfg) // DialTimeout 0: returns at once, dials on use
	if err != nil {
		return nil, err
	}
	m.cli = cli
	return cli, nil
}

// healthy reports whether member i serves a linearizable read, which
// needs a leader and a quorum (what `etcdctl endpoint health` checks).
func (c *Cluster) healthy(i int) error {
	cli, err := c.client(i)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := cli.Get(ctx, "health"); err != nil {
		return fmt.Errorf("etcd %s: %w", c.members[i].name, err)
	}
	return nil
}

// WaitHealthy waits up to d until every given member serves a
// linearizable read, which needs a leader and a quorum.
func (c *Cluster) WaitHealthy(d time.Duration, members ...int) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := c.firstUnhealthy(members)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("etcd did not become healthy in %v: %v", d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *Cluster) firstUnhealthy(members []int) error {
	for _, i := range members {
		if err := c.healthy(i); err != nil {
			return err
		}
	}
	return nil
}

// Leader returns the index of the member that is etcd's raft leader now,
// as the running members report it.
func (c *Cluster) Leader() int {
	c.t.Helper()
	var running []int
	c.mu.Lock()
	for i, m := range c.members {
		if m.cmd != nil {
			running = append(running, i)
		}
	}
	c.mu.Unlock()
	var errs []error
	for _, i := range running {
		cli, err := c.client(i)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := cli.Status(ctx, "http://"+c.members[i].client)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("etcd %s: %w", c.members[i].name, err))
			continue
		}
		if st.Leader != 0 && st.Header.MemberId == st.Leader {
			return i
		}
	}
	c.t.Fatalf("no running member reports itself the leader: %v", errors.Join(errs...))
	return -1
}
