package cell

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
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/monolock/monolock/go/internal/testtools"
)

// EtcdOptions describe an etcd cluster for StartEtcd.
type EtcdOptions struct {
	// Dir holds member i's data directory (Dir/<name>/data) and its log
	// (Dir/<name>/etcd.log).
	Dir string
	// Members is the number of members; 0 means 3.
	Members int
	// Bin is the etcd binary; "" looks it up through
	// scripts/system-tools.tsv, whose error names the package to install.
	Bin string
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
	// BasePort+2i and for peers on BasePort+2i+1. Use it inside a network
	// namespace of their own, where nothing else listens (the machine's own
	// ports then play no part: they may run out under load), or for a cell
	// that people type the addresses of (mage ha).
	BasePort int
}

// statusTimeout bounds one health or status call to one member: a running
// member answers in milliseconds, a loaded 2-core machine in well under 2 s.
const statusTimeout = 2 * time.Second

// Etcd is a real etcd cluster, one process per member, each with its own
// data directory, on 127.0.0.1 ports. Members can be killed (kill -9) and
// restarted with their data.
type Etcd struct {
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
	cmd                          *exec.Cmd // nil while killed
	exited                       chan struct{}
	cli                          *clientv3.Client // made on first use, dropped on a kill
}

// StartEtcd starts the members and waits (up to wait) until every one of
// them serves a linearizable read, so a leader is elected. On an error
// every member it started is killed again.
func StartEtcd(ctx context.Context, o EtcdOptions, wait time.Duration) (*Etcd, error) {
	if o.Dir == "" {
		return nil, errors.New("cell: EtcdOptions.Dir is empty")
	}
	n := o.Members
	if n == 0 {
		n = 3
	}
	e := &Etcd{netns: o.Netns, host: o.ClientHost, bin: o.Bin,
		token: fmt.Sprintf("monolock-cell-%d-%d", os.Getpid(), time.Now().UnixNano())}
	var err error
	if e.bin == "" {
		if e.bin, err = testtools.Lookup("etcd"); err != nil {
			return nil, err
		}
	}
	if e.netns != "" {
		if e.ip, err = testtools.Lookup("ip"); err != nil {
			return nil, err
		}
	}
	var initial []string
	for i := range n {
		m := &member{name: MemberName(i), dir: filepath.Join(o.Dir, MemberName(i)), log: MemberLog(o.Dir, i)}
		if o.BasePort != 0 {
			m.client = fmt.Sprintf("127.0.0.1:%d", o.BasePort+2*i)
			m.peer = fmt.Sprintf("127.0.0.1:%d", o.BasePort+2*i+1)
		} else if m.client, err = FreeAddr(); err == nil {
			m.peer, err = FreeAddr()
		}
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(m.dir, 0o700); err != nil {
			return nil, err
		}
		e.members = append(e.members, m)
		initial = append(initial, m.name+"=http://"+m.peer)
	}
	e.initial = strings.Join(initial, ",")
	for i := range e.members {
		if err := e.Restart(i); err != nil {
			e.Close()
			return nil, err
		}
	}
	if err := e.WaitHealthy(ctx, wait, e.all()...); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

func (e *Etcd) all() []int {
	idx := make([]int, len(e.members))
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// command runs name in the cluster's network namespace, if it has one.
func (e *Etcd) command(name string, args ...string) *exec.Cmd {
	if e.netns == "" {
		return exec.Command(name, args...)
	}
	return exec.Command(e.ip, append([]string{"netns", "exec", e.netns, name}, args...)...)
}

// Restart starts member i with its data directory: a new member the first
// time, the same member afterwards (etcd ignores the --initial-* flags
// once its data directory holds a member). A running member is an error.
// It does not wait: use WaitHealthy.
func (e *Etcd) Restart(i int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	m := e.members[i]
	if m.cmd != nil {
		return fmt.Errorf("cell: etcd %s is already running", m.name)
	}
	clientURL, peerURL := "http://"+m.client, "http://"+m.peer
	listenURL := clientURL
	if e.host != "" {
		_, port, _ := net.SplitHostPort(m.client)
		listenURL = "http://" + net.JoinHostPort(e.host, port)
	}
	cmd := e.command(e.bin,
		"--name", m.name, "--data-dir", filepath.Join(m.dir, "data"),
		"--listen-client-urls", listenURL, "--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", e.initial, "--initial-cluster-state", "new",
		"--initial-cluster-token", e.token, "--log-level", "warn")
	logf, err := os.OpenFile(m.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("cell: etcd %s: %w", m.name, err)
	}
	m.cmd, m.exited = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); logf.Close(); close(done) }(m.exited)
	return nil
}

func (e *Etcd) killLocked(m *member) {
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

// Kill kills member i with SIGKILL and waits until it is gone.
func (e *Etcd) Kill(i int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.killLocked(e.members[i])
}

// Close kills every member (their data directories stay, for the caller
// to remove with Dir).
func (e *Etcd) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, m := range e.members {
		e.killLocked(m)
	}
}

// Len is the number of members.
func (e *Etcd) Len() int { return len(e.members) }

// Running reports whether member i runs (it was not killed, or was
// restarted since).
func (e *Etcd) Running(i int) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.members[i].cmd != nil
}

// PID is member i's process id, 0 while it is killed. (In a network
// namespace it is that of the `ip netns exec` that became etcd.)
func (e *Etcd) PID(i int) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if m := e.members[i]; m.cmd != nil {
		return m.cmd.Process.Pid
	}
	return 0
}

// MemberName is member i's etcd name; MemberLog its log file under the
// cluster's directory, which stays after Close (for a failed test's tail).
func MemberName(i int) string            { return fmt.Sprintf("m%d", i) }
func MemberLog(dir string, i int) string { return filepath.Join(dir, MemberName(i), "etcd.log") }

// Endpoint is member i's client address, HOST:PORT.
func (e *Etcd) Endpoint(i int) string { return e.members[i].client }

// Endpoints lists every member's client address, comma-separated, as
// `monolock serve --etcd` takes them.
func (e *Etcd) Endpoints() string {
	eps := make([]string, len(e.members))
	for i, m := range e.members {
		eps[i] = m.client
	}
	return strings.Join(eps, ",")
}

// client returns the etcd client of member i, made on first use. It dials
// inside the cluster's network namespace when there is one, so this
// process reaches members that listen on that namespace's loopback.
func (e *Etcd) client(i int) (*clientv3.Client, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	m := e.members[i]
	if m.cli != nil {
		return m.cli, nil
	}
	// A member that is down is expected here: no log.
	cfg := clientv3.Config{Endpoints: []string{"http://" + m.client}, Logger: zap.NewNop()}
	if e.netns != "" {
		cfg.DialOptions = []grpc.DialOption{grpc.WithContextDialer(netnsDialer(e.netns))}
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
func (e *Etcd) healthy(ctx context.Context, i int) error {
	cli, err := e.client(i)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	if _, err := cli.Get(ctx, "health"); err != nil {
		return fmt.Errorf("etcd %s: %w", e.members[i].name, err)
	}
	return nil
}

// WaitHealthy waits up to d until every given member serves a
// linearizable read, which needs a leader and a quorum.
func (e *Etcd) WaitHealthy(ctx context.Context, d time.Duration, members ...int) error {
	deadline := time.Now().Add(d)
	for {
		err := e.firstUnhealthy(ctx, members)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("etcd did not become healthy in %v: %w", d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (e *Etcd) firstUnhealthy(ctx context.Context, members []int) error {
	for _, i := range members {
		if err := e.healthy(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// Leader returns the index of the member that is etcd's raft leader now:
// a running member that reports itself the leader.
func (e *Etcd) Leader(ctx context.Context) (int, error) {
	var errs []error
	for i := range e.members {
		if !e.Running(i) {
			continue
		}
		cli, err := e.client(i)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, statusTimeout)
		st, err := cli.Status(sctx, "http://"+e.members[i].client)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("etcd %s: %w", e.members[i].name, err))
			continue
		}
		if st.Leader != 0 && st.Header.MemberId == st.Leader {
			return i, nil
		}
	}
	return -1, fmt.Errorf("no running etcd member reports itself the leader: %w", errors.Join(errs...))
}

// Elect kills the raft leader and returns how long the others took to
// elect a new one, as the first status reply of a member that reports
// itself the new leader shows. The old leader is started again before it
// returns.
func (e *Etcd) Elect(ctx context.Context) (time.Duration, error) {
	old, err := e.Leader(ctx)
	if err != nil {
		return 0, err
	}
	e.Kill(old)
	killed := time.Now()
	defer func() { _ = e.Restart(old) }()
	for time.Since(killed) < 30*time.Second && ctx.Err() == nil {
		if i, err := e.Leader(ctx); err == nil && i != old {
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
// returned. (Not for a cluster in a network namespace.)
func (e *Etcd) RecipeHandover(ctx context.Context, ttl time.Duration) (time.Duration, error) {
	newSession := func() (*clientv3.Client, *concurrency.Session, error) {
		cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(e.Endpoints(), ","), DialTimeout: 2 * time.Second,
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

// handedOut holds every address FreeAddr has returned in this process: a
// port closed after it was picked is free again, and the kernel may pick it
// for the next caller, so two servers of one test could be given the same
// address (seen: a server's admin API on its own listen port).
var handedOut = struct {
	sync.Mutex
	addrs map[string]bool
}{addrs: map[string]bool{}}

// FreeAddr returns a loopback address whose port was free a moment ago and
// that it has not returned before in this process.
func FreeAddr() (string, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", fmt.Errorf("cell: no free loopback port: %w", err)
		}
		addr := ln.Addr().String()
		ln.Close()
		if !handedOut.addrs[addr] {
			handedOut.addrs[addr] = true
			return addr, nil
		}
	}
	return "", fmt.Errorf("cell: the kernel keeps offering loopback ports already handed out")
}
