package main

// Helpers of the HA failure tests on a three-member etcd
// (ha_failures_test.go): servers of a cell, a fenced resource with a ledger
// of validity windows, and network namespaces for partitions.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/monolock/monolock/go/client"
	"github.com/monolock/monolock/go/internal/testbin"
	"github.com/monolock/monolock/go/internal/testtools"
)

// cellMember starts one `monolock serve` of an HA cell (2 s etcd TTL) on
// the etcd endpoints etcd, listening on and advertising listen. wrap
// prefixes the command line (e.g. `ip netns exec NS`); it execs, so the
// process is the server itself.
func cellMember(t *testing.T, etcd, listen string, wrap ...string) *testbin.Server {
	t.Helper()
	argv := append(append([]string(nil), wrap...), binary, "serve", "--data-dir", t.TempDir(),
		"--listen", listen, "--advertise", listen, "--admin", "off",
		"--etcd", etcd, "--etcd-prefix", "/test-cell/", "--etcd-ttl", "2s")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = cleanEnv()
	return testbin.Start(t, wait, cmd)
}

// logHas reports whether a server has logged a line containing sub so far.
func logHas(s *testbin.Server, sub string) bool {
	for _, l := range s.Log() {
		if strings.Contains(l, sub) {
			return true
		}
	}
	return false
}

// fence is the resource the locks protect: it remembers the largest token
// it accepted and rejects any smaller one.
type fence struct {
	mu       sync.Mutex
	max      uint64
	accepted int
	rejected int
}

func (f *fence) write(token uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if token < f.max {
		f.rejected++
		return false
	}
	f.max = token
	f.accepted++
	return true
}

// window is one holder's validity: from its grant (Acquire returned) to the
// close of its Done channel (or the moment it decided to release).
type window struct {
	who        string
	token      uint64
	start, end time.Time
}

// ledger records the validity windows of one lock's holders, as they see
// them through the client's public API, and writes to the fence with their
// tokens. check finds overlapping windows and tokens that do not increase.
// Nothing here is retried: one violation fails the test.
type ledger struct {
	t     *testing.T
	fence fence
	mu    sync.Mutex
	wins  []*window
}

// hold records a grant: the window starts now, the holder writes to the
// fence, and the window ends when Done closes.
func (l *ledger) hold(lock *client.Lock, who string) *window {
	w := &window{who: who, token: lock.Token(), start: time.Now()}
	l.mu.Lock()
	l.wins = append(l.wins, w)
	l.mu.Unlock()
	if !l.fence.write(w.token) {
		l.t.Errorf("%s was granted token %d, but the fence had accepted %d: tokens went back", who, w.token, l.fence.max)
	}
	go func() {
		<-lock.Done()
		l.end(w, time.Now())
	}()
	return w
}

// write is a holder's write while it believes it holds the lock: the fence
// must accept it.
func (l *ledger) write(w *window, lock *client.Lock) {
	if lock.Err() != nil {
		return // lost: the holder does not write
	}
	if !l.fence.write(w.token) {
		l.t.Errorf("%s holds token %d and the fence rejected its write: a larger token was used while it held the lock", w.who, w.token)
	}
}

// release ends the window, then releases the lock: the holder stops using
// the lock before it lets it go (Release closes Done at once anyway).
func (l *ledger) release(w *window, lock *client.Lock) {
	l.end(w, time.Now())
	_ = lock.Release()
}

func (l *ledger) end(w *window, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.end.IsZero() {
		w.end = at
	}
}

// check fails the test on two windows that overlap or tokens that do not
// strictly increase in grant order, and returns the windows in that order.
func (l *ledger) check() []window {
	l.t.Helper()
	l.mu.Lock()
	wins := make([]window, len(l.wins))
	for i, w := range l.wins {
		wins[i] = *w
	}
	l.mu.Unlock()
	sort.Slice(wins, func(i, j int) bool { return wins[i].start.Before(wins[j].start) })
	for i := 1; i < len(wins); i++ {
		prev, next := wins[i-1], wins[i]
		if prev.end.IsZero() || next.start.Before(prev.end) {
			l.t.Errorf("overlapping validity windows: %s (token %d) valid from %v until %v, %s (token %d) granted at %v",
				prev.who, prev.token, prev.start.Format(time.StampMicro), prev.end.Format(time.StampMicro),
				next.who, next.token, next.start.Format(time.StampMicro))
		}
		if next.token <= prev.token {
			l.t.Errorf("token %d (%s) granted after token %d (%s)", next.token, next.who, prev.token, prev.who)
		}
	}
	if l.fence.rejected > 0 {
		l.t.Errorf("the fence rejected %d writes", l.fence.rejected)
	}
	return wins
}

// syncBuffer is a bytes.Buffer safe for a client's logger.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// netLab is two network namespaces made by the test: "cell" (etcd and the
// monolock servers, on its own loopback) and "clients", joined by one veth
// pair per server. Server k listens on 10.77.k.1 (its veth in the cell
// namespace); the clients reach it from 10.77.k.2. Cutting link k
// partitions server k from every client and from nothing else. No address
// or link is added outside these two namespaces, which are deleted when the
// test ends.
type netLab struct {
	t             *testing.T
	cell, clients string
	servers       int
	cellIf, cliIf []string
	ipPath        string // the ip command of iproute2
}

var netLabs atomic.Int32

func newNetLab(t *testing.T, servers int) *netLab {
	t.Helper()
	// A partition test that cannot partition must say so, not pass.
	if os.Geteuid() != 0 {
		t.Fatal("network namespaces need root: run the HA partition tests as root")
	}
	id := fmt.Sprintf("mlk%d-%d", os.Getpid(), netLabs.Add(1))
	l := &netLab{t: t, cell: id + "-cell", clients: id + "-cli", servers: servers, ipPath: testtools.Require(t, "ip")}
	l.ip("netns", "add", l.cell)
	t.Cleanup(func() { _ = exec.Command(l.ipPath, "netns", "del", l.cell).Run() })
	l.ip("netns", "add", l.clients)
	t.Cleanup(func() { _ = exec.Command(l.ipPath, "netns", "del", l.clients).Run() })
	l.ip("-n", l.cell, "link", "set", "lo", "up")
	l.ip("-n", l.clients, "link", "set", "lo", "up")
	for k := 1; k <= servers; k++ {
		// Created straight inside the namespaces: the veth never exists
		// in the machine's own namespace.
		ci, ki := fmt.Sprintf("mlks%d", k), fmt.Sprintf("mlkc%d", k)
		l.ip("link", "add", "name", ci, "netns", l.cell, "type", "veth", "peer", "name", ki, "netns", l.clients)
		l.ip("-n", l.cell, "addr", "add", fmt.Sprintf("10.77.%d.1/24", k), "dev", ci)
		l.ip("-n", l.clients, "addr", "add", fmt.Sprintf("10.77.%d.2/24", k), "dev", ki)
		l.cellIf, l.cliIf = append(l.cellIf, ci), append(l.cliIf, ki)
		l.setLink(k, "up")
	}
	return l
}

func (l *netLab) ip(args ...string) {
	l.t.Helper()
	if out, err := exec.Command(l.ipPath, args...).CombinedOutput(); err != nil {
		l.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// wrapCell is the command prefix that runs a program in the cell namespace.
func (l *netLab) wrapCell() []string { return []string{l.ipPath, "netns", "exec", l.cell} }

// serverAddr is the address server k (from 1) listens on.
func (l *netLab) serverAddr(k int) string { return fmt.Sprintf("10.77.%d.1:7117", k) }

func (l *netLab) setLink(k int, state string) {
	l.t.Helper()
	l.ip("-n", l.cell, "link", "set", l.cellIf[k-1], state)
	l.ip("-n", l.clients, "link", "set", l.cliIf[k-1], state)
}

// cut partitions server k from the clients: both ends of its link go down,
// so packets are dropped, and nothing is reset.
func (l *netLab) cut(k int) { l.t.Helper(); l.setLink(k, "down") }

// heal brings server k's link back.
func (l *netLab) heal(k int) { l.t.Helper(); l.setLink(k, "up") }

// goClient runs f in a new goroutine whose thread is in the clients'
// namespace, so every connection f opens (the client library dials in the
// goroutine that calls Acquire) goes over the veth links. The thread is
// never unlocked: it ends with the goroutine and is never reused in the
// machine's own namespace. The returned channel closes when f returns.
func (l *netLab) goClient(f func()) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		fd, err := unix.Open("/run/netns/"+l.clients, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			l.t.Errorf("open the clients' namespace: %v", err)
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			l.t.Errorf("enter the clients' namespace: %v", err)
			return
		}
		f()
	}()
	return done
}
