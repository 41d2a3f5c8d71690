// Package cell runs a local monolock cell: an etcd cluster of one or more
// members (StartEtcd: kill, restart, find the raft leader, optionally
// inside a network namespace) and N `monolock serve` on it (Start, through
// go/testkit/launch), or one server without etcd. It is the one launcher
// behind the HA tests (go/internal/testetcd wraps it for testing.T), the
// chaos harness (conformance/chaos), the benchmark's failover section and
// `go run mage.go ha` (go/testkit/cmd/hacell).
//
// It lives beside go/testkit/launch, for the same reason: the conformance
// and bench modules import it, so it cannot be under go/internal/, and it
// is test support, not the product's API under go/pkg/. Unlike launch it
// imports etcd's Go client (for health checks, the raft leader and the
// election recipe's timing) and zap and grpc around it; the go module
// requires all three already, for the server, so a user's module graph
// gains nothing. Every process listens on loopback, or inside a network
// namespace the caller made.
package cell

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/monolock/monolock/go/testkit/launch"
)

// Options describe a cell for Start.
type Options struct {
	Bin     string // the monolock binary
	Dir     string // data directories and logs go here
	Servers int    // monolock servers: 1 without etcd
	Etcd    int    // etcd members; 0 runs one server on its data directory
	// EtcdBasePort gives the etcd members fixed ports (EtcdOptions.BasePort).
	EtcdBasePort int
	EtcdTTL      time.Duration // the servers' --etcd-ttl; 0 means 2 s
	Prefix       string        // the servers' --etcd-prefix; "" means /monolock/cell/
	// Addrs and AdminAddrs, when set, fix server i's lock protocol and
	// admin API addresses; otherwise each is a free loopback port. Either
	// way a server that is killed comes back at the same addresses.
	Addrs, AdminAddrs []string
	// EtcdLink, when set, returns the address server i dials to reach etcd
	// member j (whose client address is endpoint): a fault proxy, say, so
	// that one server can be cut off from etcd and nothing else.
	EtcdLink func(server, member int, endpoint string) (string, error)
}

// etcdWait bounds the etcd cluster's start: a new three-member cluster
// elects a leader within a few seconds even on a loaded machine.
const etcdWait = 30 * time.Second

// Cell is a running cell.
type Cell struct {
	opts   Options
	addrs  []string // lock protocol address of server i
	admins []string // admin address of server i
	etcd   *Etcd    // nil without etcd
	// etcdEndpoints[i] is server i's --etcd.
	etcdEndpoints []string

	mu      sync.Mutex
	servers []*launch.Server // nil while killed
}

// Start starts the etcd members (if any), then the servers.
func Start(ctx context.Context, o Options) (*Cell, error) {
	if o.Servers < 1 || (o.Etcd == 0 && o.Servers != 1) {
		return nil, fmt.Errorf("cell: %d servers on %d etcd members: want 1 server without etcd", o.Servers, o.Etcd)
	}
	if (o.Addrs != nil && len(o.Addrs) != o.Servers) || (o.AdminAddrs != nil && len(o.AdminAddrs) != o.Servers) {
		return nil, fmt.Errorf("cell: %d servers, %d addresses and %d admin addresses", o.Servers, len(o.Addrs), len(o.AdminAddrs))
	}
	if o.EtcdTTL == 0 {
		o.EtcdTTL = 2 * time.Second
	}
	if o.Prefix == "" {
		o.Prefix = "/monolock/cell/"
	}
	c := &Cell{opts: o, addrs: o.Addrs, admins: o.AdminAddrs, servers: make([]*launch.Server, o.Servers)}
	// A port closed after it was picked may be picked again: every address
	// of the cell must be its own.
	taken := map[string]bool{}
	for _, a := range append(append([]string(nil), c.addrs...), c.admins...) {
		taken[a] = true
	}
	for _, list := range []*[]string{&c.addrs, &c.admins} {
		for len(*list) < o.Servers {
			a, err := FreeAddr()
			if err != nil {
				return nil, err
			}
			if !taken[a] {
				taken[a] = true
				*list = append(*list, a)
			}
		}
	}
	if o.Etcd > 0 {
		var err error
		c.etcd, err = StartEtcd(ctx, EtcdOptions{Dir: o.Dir, Members: o.Etcd, BasePort: o.EtcdBasePort}, etcdWait)
		if err != nil {
			return nil, err
		}
		for i := range o.Servers {
			eps := make([]string, c.etcd.Len())
			for j := range eps {
				eps[j] = c.etcd.Endpoint(j)
				if o.EtcdLink != nil {
					if eps[j], err = o.EtcdLink(i, j, eps[j]); err != nil {
						c.Close()
						return nil, err
					}
				}
			}
			c.etcdEndpoints = append(c.etcdEndpoints, strings.Join(eps, ","))
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
func (c *Cell) HA() bool { return c.etcd != nil }

// Etcd is the cell's etcd cluster, nil without one.
func (c *Cell) Etcd() *Etcd { return c.etcd }

// Addrs are the servers' lock protocol addresses, in order; AdminAddrs
// their admin APIs'.
func (c *Cell) Addrs() []string      { return c.addrs }
func (c *Cell) AdminAddrs() []string { return c.admins }

// LogPath is where server i's stderr goes, across its restarts.
func (c *Cell) LogPath(i int) string {
	return filepath.Join(c.opts.Dir, fmt.Sprintf("server%d.log", i))
}

// Restart starts server i again (it must be killed or not yet started),
// on its addresses and data directory, and waits for its ready file.
func (c *Cell) Restart(ctx context.Context, i int) error {
	if c.Running(i) {
		return fmt.Errorf("cell: server %d is running", i)
	}
	args := []string{"--listen", c.addrs[i], "--admin", c.admins[i],
		"--data-dir", filepath.Join(c.opts.Dir, fmt.Sprintf("server%d", i))}
	if c.HA() {
		args = append(args, "--etcd", c.etcdEndpoints[i], "--etcd-prefix", c.opts.Prefix, "--advertise", c.addrs[i],
			"--etcd-ttl", c.opts.EtcdTTL.String())
	}
	if err := os.MkdirAll(c.opts.Dir, 0o700); err != nil {
		return err
	}
	logf, err := os.OpenFile(c.LogPath(i), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := launch.Command(c.opts.Bin, args...)
	cmd.Stderr = logf
	s, err := launch.Start(ctx, cmd, launch.Options{Wait: 20 * time.Second, StopGrace: 15 * time.Second})
	if err != nil {
		logf.Close()
		return fmt.Errorf("server %d: %w", i, err)
	}
	go func() { <-s.Exited(); logf.Close() }()
	c.mu.Lock()
	c.servers[i] = s
	c.mu.Unlock()
	return nil
}

// take removes server i from the cell and returns it; nil if it was not
// running.
func (c *Cell) take(i int) *launch.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.servers[i]
	c.servers[i] = nil
	return s
}

// Kill kills server i with SIGKILL; false if it was not running.
func (c *Cell) Kill(i int) bool {
	s := c.take(i)
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

// Running reports whether server i runs.
func (c *Cell) Running(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.servers[i] != nil
}

// Exited reports whether server i has ended on its own (it crashed, or
// was killed from outside the cell); false while it runs or after Kill.
func (c *Cell) Exited(i int) bool {
	c.mu.Lock()
	s := c.servers[i]
	c.mu.Unlock()
	if s == nil {
		return false
	}
	select {
	case <-s.Exited():
		return true
	default:
		return false
	}
}

// PID is server i's process id, 0 while it is killed.
func (c *Cell) PID(i int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.servers[i]; s != nil {
		return s.PID()
	}
	return 0
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

// Close stops every server gracefully (SIGTERM; SIGKILL after 15 s), then
// kills the etcd members. It returns an error when a server needed the
// kill. The data directories stay, for the caller to remove.
func (c *Cell) Close() error {
	var errs []error
	for i := range c.servers {
		if s := c.take(i); s != nil {
			if err := s.Stop(); err != nil {
				errs = append(errs, fmt.Errorf("server %d: %w", i, err))
			}
		}
	}
	if c.etcd != nil {
		c.etcd.Close()
	}
	return errors.Join(errs...)
}

// Describe names the cell for reports.
func (c *Cell) Describe() string {
	if !c.HA() {
		return "one monolock serve"
	}
	return strconv.Itoa(len(c.addrs)) + " monolock servers on " + strconv.Itoa(c.etcd.Len()) + " etcd members"
}
