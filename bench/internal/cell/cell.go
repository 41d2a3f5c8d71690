// Package cell runs a local monolock cell for the chaos harness: one
// `monolock serve`, or an HA cell of several servers on a local etcd
// cluster, each process on a fixed loopback port so that a killed process
// comes back at the same address.
package cell

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/monolock/monolock/bench/internal/monoserver"
	"github.com/monolock/monolock/conformance/proxy"
)

// Options describe the cell.
type Options struct {
	Bin     string // the monolock binary
	Dir     string // data directories and logs go here
	Servers int    // monolock servers: 1 without etcd
	Etcd    int    // etcd members; 0 runs one server on its data directory
	EtcdTTL time.Duration
}

// Cell is a running cell.
type Cell struct {
	opts     Options
	prefix   string
	addrs    []string // lock protocol address of server i
	admins   []string // admin address of server i
	members  []*member
	endpoint string // etcd client endpoints, comma-separated
	// etcdLinks[i][j] carries server i's traffic to etcd member j, so that
	// one server can be cut off from etcd while it still serves clients.
	etcdLinks [][]*proxy.Proxy

	mu      sync.Mutex
	servers []*monoserver.Server // nil while killed
}

type member struct {
	name, client, peer string
	cmd                *exec.Cmd
	done               chan struct{}
}

// Start starts the etcd members (if any), then the servers.
func Start(ctx context.Context, o Options) (*Cell, error) {
	if o.Servers < 1 || (o.Etcd == 0 && o.Servers != 1) {
		return nil, fmt.Errorf("cell: %d servers on %d etcd members: want 1 server without etcd", o.Servers, o.Etcd)
	}
	if o.EtcdTTL == 0 {
		o.EtcdTTL = 2 * time.Second
	}
	c := &Cell{opts: o, prefix: "/monolock/chaos/", servers: make([]*monoserver.Server, o.Servers)}
	for range o.Servers {
		c.addrs = append(c.addrs, freeAddr())
		c.admins = append(c.admins, freeAddr())
	}
	if o.Etcd > 0 {
		if err := c.startEtcd(ctx); err != nil {
			c.Close()
			return nil, err
		}
		for range o.Servers {
			var links []*proxy.Proxy
			for _, m := range c.members {
				p, err := proxy.Listen(m.client, time.Now())
				if err != nil {
					c.Close()
					return nil, err
				}
				links = append(links, p)
			}
			c.etcdLinks = append(c.etcdLinks, links)
		}
	}
	for i := range o.Servers {
		if err := c.Restart(ctx, i); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// HA reports whether the servers form an HA cell.
func (c *Cell) HA() bool { return c.opts.Etcd > 0 }

// Addrs are the servers' lock protocol addresses, in order.
func (c *Cell) Addrs() []string { return c.addrs }

// Restart starts server i again (it must be killed or not yet started),
// on its address and data directory.
func (c *Cell) Restart(ctx context.Context, i int) error {
	args := []string{"--listen", c.addrs[i], "--admin", c.admins[i]}
	if c.HA() {
		var endpoints []string
		for _, p := range c.etcdLinks[i] {
			endpoints = append(endpoints, p.Addr())
		}
		args = append(args, "--etcd", strings.Join(endpoints, ","), "--etcd-prefix", c.prefix, "--advertise", c.addrs[i],
			"--etcd-ttl", c.opts.EtcdTTL.String())
	}
	s, err := monoserver.Start(ctx, c.opts.Bin, filepath.Join(c.opts.Dir, fmt.Sprintf("server%d", i)), args...)
	if err != nil {
		return fmt.Errorf("server %d: %w", i, err)
	}
	c.mu.Lock()
	c.servers[i] = s
	c.mu.Unlock()
	return nil
}

// Kill kills server i with SIGKILL; false if it was not running.
func (c *Cell) Kill(i int) bool {
	c.mu.Lock()
	s := c.servers[i]
	c.servers[i] = nil
	c.mu.Unlock()
	if s == nil {
		return false
	}
	s.Kill()
	return true
}

// Signal sends sig to server i (SIGSTOP, SIGCONT); false if it is not
// running.
func (c *Cell) Signal(i int, sig os.Signal) bool {
	c.mu.Lock()
	s := c.servers[i]
	c.mu.Unlock()
	return s != nil && s.Signal(sig) == nil
}

// CutFromEtcd cuts server i off from every etcd member, or restores its
// links: while cut, nothing passes either way and no connection is closed,
// as in a network partition. Its clients still reach it.
func (c *Cell) CutFromEtcd(i int, cut bool) {
	for _, p := range c.etcdLinks[i] {
		p.Set(proxy.Faults{Blackhole: [2]bool{cut, cut}})
	}
}

// Running reports whether server i runs.
func (c *Cell) Running(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.servers[i] != nil
}

// Leader returns the index of the active server, as the servers' admin
// APIs say: -1 if none claims it now. A single server is always active.
func (c *Cell) Leader(ctx context.Context) int {
	i, _ := c.active(ctx)
	return i
}

// Ready waits until a server is active and past its grace, and returns it.
func (c *Cell) Ready(ctx context.Context, within time.Duration) (int, error) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if i, grace := c.active(ctx); i >= 0 && grace == 0 {
			return i, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return -1, fmt.Errorf("cell: no active server past its grace within %v", within)
}

// active asks each running server's GET /v1/cell and returns the one that
// says it leads, with the grace it still waits (ms); -1 if none does.
func (c *Cell) active(ctx context.Context) (int, int64) {
	if !c.HA() {
		return 0, 0
	}
	for i := range c.addrs {
		if !c.Running(i) {
			continue
		}
		var st struct {
			Role  string `json:"role"`
			Grace int64  `json:"grace_remaining_ms"`
		}
		if err := getJSON(ctx, "http://"+c.admins[i]+"/v1/cell", &st); err == nil && st.Role == "leader" {
			return i, st.Grace
		}
	}
	return -1, 0
}

func getJSON(ctx context.Context, url string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// Close stops every process.
func (c *Cell) Close() {
	for i := range c.servers {
		c.mu.Lock()
		s := c.servers[i]
		c.servers[i] = nil
		c.mu.Unlock()
		if s != nil {
			s.Stop()
		}
	}
	for i := range c.members {
		c.KillEtcd(i)
	}
	for _, links := range c.etcdLinks {
		for _, p := range links {
			p.Close()
		}
	}
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("cell: no free loopback port: %v", err))
	}
	defer ln.Close()
	return ln.Addr().String()
}

func (c *Cell) startEtcd(ctx context.Context) error {
	if _, err := exec.LookPath("etcd"); err != nil {
		return errors.New("cell: etcd not found: run `go run mage.go deps` (Debian's etcd-server)")
	}
	var initial, endpoints []string
	for i := range c.opts.Etcd {
		m := &member{name: fmt.Sprintf("e%d", i), client: freeAddr(), peer: freeAddr()}
		c.members = append(c.members, m)
		initial = append(initial, m.name+"=http://"+m.peer)
		endpoints = append(endpoints, m.client)
	}
	c.endpoint = strings.Join(endpoints, ",")
	for i := range c.members {
		if err := c.startMember(i, strings.Join(initial, ","), "new"); err != nil {
			return err
		}
	}
	return c.waitEtcd(ctx)
}

func (c *Cell) startMember(i int, initial, state string) error {
	m := c.members[i]
	dir := filepath.Join(c.opts.Dir, m.name)
	if err := os.MkdirAll(c.opts.Dir, 0o700); err != nil {
		return err
	}
	logf, err := os.OpenFile(dir+".log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	m.cmd = exec.Command("etcd", "--name", m.name, "--data-dir", dir, "--log-level", "warn",
		"--listen-client-urls", "http://"+m.client, "--advertise-client-urls", "http://"+m.client,
		"--listen-peer-urls", "http://"+m.peer, "--initial-advertise-peer-urls", "http://"+m.peer,
		"--initial-cluster", initial, "--initial-cluster-state", state)
	m.cmd.Stdout, m.cmd.Stderr = logf, logf
	if err := m.cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("cell: etcd %s: %w", m.name, err)
	}
	m.done = make(chan struct{})
	go func() { _ = m.cmd.Wait(); logf.Close(); close(m.done) }()
	return nil
}

// waitEtcd waits until the cluster has a leader.
func (c *Cell) waitEtcd(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := c.EtcdLeader(ctx); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("cell: etcd elected no leader within 30 s (see its logs in " + c.opts.Dir + ")")
}

// EtcdMembers is the number of etcd members.
func (c *Cell) EtcdMembers() int { return len(c.members) }

// EtcdLeader returns the index of the etcd member that a running member
// reports as the raft leader.
func (c *Cell) EtcdLeader(ctx context.Context) (int, error) {
	ids := map[uint64]int{}
	var leader uint64
	for i, m := range c.members {
		if m.cmd == nil {
			continue
		}
		st, err := status(ctx, m.client)
		if err != nil {
			continue
		}
		ids[st.Header.MemberId] = i
		if st.Leader != 0 {
			leader = st.Leader
		}
	}
	if i, ok := ids[leader]; ok && leader != 0 {
		return i, nil
	}
	return -1, errors.New("no etcd leader")
}

func status(ctx context.Context, endpoint string) (*clientv3.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 500 * time.Millisecond,
		Logger: zap.NewNop()}) // a member that is down is expected here

	if err != nil {
		return nil, err
	}
	defer cli.Close()
	return cli.Status(ctx, endpoint)
}

// KillEtcd kills member i with SIGKILL.
func (c *Cell) KillEtcd(i int) {
	m := c.members[i]
	if m.cmd == nil {
		return
	}
	_ = m.cmd.Process.Kill()
	<-m.done
	m.cmd = nil
}

// RestartEtcd starts member i again on its data directory.
func (c *Cell) RestartEtcd(i int) error {
	if c.members[i].cmd != nil {
		return nil
	}
	var initial []string
	for _, m := range c.members {
		initial = append(initial, m.name+"=http://"+m.peer)
	}
	return c.startMember(i, strings.Join(initial, ","), "existing")
}

// ElectEtcd kills the etcd leader and returns how long the others took to
// elect a new one, as the first status reply naming another leader shows.
// The old leader is started again before it returns.
func (c *Cell) ElectEtcd(ctx context.Context) (time.Duration, error) {
	old, err := c.EtcdLeader(ctx)
	if err != nil {
		return 0, err
	}
	c.KillEtcd(old)
	killed := time.Now()
	defer func() { _ = c.RestartEtcd(old) }()
	for time.Since(killed) < 30*time.Second {
		if i, err := c.EtcdLeader(ctx); err == nil && i != old {
			return time.Since(killed), nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return 0, errors.New("cell: etcd elected no new leader within 30 s of losing one")
}

// RecipeHandover measures etcd's own election recipe (concurrency.Election,
// on which the HA cell's leadership rests): two campaigners with sessions
// of ttl; the leader's process vanishes without revoking its lease, as
// kill -9 would leave it, and the time until the other is elected is
// returned.
func (c *Cell) RecipeHandover(ctx context.Context, ttl time.Duration) (time.Duration, error) {
	newSession := func() (*clientv3.Client, *concurrency.Session, error) {
		cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(c.endpoint, ","), DialTimeout: 2 * time.Second,
			Logger: zap.NewNop()})
		if err != nil {
			return nil, nil, err
		}
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(ttl.Seconds())))
		if err != nil {
			cli.Close()
			return nil, nil, err
		}
		return cli, s, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*ttl+10*time.Second)
	defer cancel()
	prefix := fmt.Sprintf("/chaos-recipe/%d/", time.Now().UnixNano())
	cli1, s1, err := newSession()
	if err != nil {
		return 0, err
	}
	if err := concurrency.NewElection(s1, prefix).Campaign(ctx, "first"); err != nil {
		cli1.Close()
		return 0, err
	}
	cli2, s2, err := newSession()
	if err != nil {
		cli1.Close()
		return 0, err
	}
	defer cli2.Close()
	defer s2.Close()
	won := make(chan error, 1)
	go func() { won <- concurrency.NewElection(s2, prefix).Campaign(ctx, "second") }()
	time.Sleep(ttl / 2) // the second campaigner is queued behind the first
	vanished := time.Now()
	cli1.Close() // keep-alives stop; the lease is not revoked
	if err := <-won; err != nil {
		return 0, err
	}
	return time.Since(vanished), nil
}

// Endpoints are the etcd client endpoints.
func (c *Cell) Endpoints() string { return c.endpoint }

// Describe names the cell for reports.
func (c *Cell) Describe() string {
	if !c.HA() {
		return "one monolock serve"
	}
	return strconv.Itoa(len(c.addrs)) + " monolock servers on " + strconv.Itoa(len(c.members)) + " etcd members"
}
