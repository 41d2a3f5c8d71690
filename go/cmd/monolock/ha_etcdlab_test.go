package main

// Network namespaces that partition HA servers from etcd while their
// clients still reach them (TestHALeaderPartitionedFromEtcd in
// ha_failures_test.go).

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/monolock/monolock/go/internal/testbin"
	"github.com/monolock/monolock/go/internal/testetcd"
	"github.com/monolock/monolock/go/internal/testtools"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// etcdLab is two network namespaces made by the test: "etcd" (the etcd
// members, listening on every address of that namespace) and "servers"
// (the monolock servers, each on its own port of that namespace's
// loopback, and the test's clients), joined by one veth pair per server.
// Server k reaches every etcd member through its own pair only: it dials
// 10.78.k.1 (the pair's end in the etcd namespace) from 10.78.k.2, both on
// the pair's connected /24, so no other route is involved. Cutting link k
// partitions server k from every etcd member and from nothing else: its
// clients still reach it on the loopback. No address or link is added
// outside these two namespaces, which are deleted when the test ends.
type etcdLab struct {
	t              *testing.T
	etcd, servers  string
	etcdIf, servIf []string
	ipPath         string // the ip command of iproute2
}

// newEtcdLab fails the test, never skips it, when namespaces cannot be made.
func newEtcdLab(t *testing.T, servers int) *etcdLab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test makes network namespaces (ip netns, veth pairs) and needs root")
	}
	id := fmt.Sprintf("mlk%d-%d", os.Getpid(), netLabs.Add(1))
	l := &etcdLab{t: t, etcd: id + "-etcd", servers: id + "-srv", ipPath: testtools.Require(t, "ip")}
	l.ip("netns", "add", l.etcd)
	t.Cleanup(func() { _ = exec.Command(l.ipPath, "netns", "del", l.etcd).Run() })
	l.ip("netns", "add", l.servers)
	t.Cleanup(func() { _ = exec.Command(l.ipPath, "netns", "del", l.servers).Run() })
	l.ip("-n", l.etcd, "link", "set", "lo", "up")
	l.ip("-n", l.servers, "link", "set", "lo", "up")
	for k := 1; k <= servers; k++ {
		// Created straight inside the namespaces: the veth never exists
		// in the machine's own namespace.
		ei, si := fmt.Sprintf("mlke%d", k), fmt.Sprintf("mlkv%d", k)
		l.ip("link", "add", "name", ei, "netns", l.etcd, "type", "veth", "peer", "name", si, "netns", l.servers)
		l.ip("-n", l.etcd, "addr", "add", fmt.Sprintf("10.78.%d.1/24", k), "dev", ei)
		l.ip("-n", l.servers, "addr", "add", fmt.Sprintf("10.78.%d.2/24", k), "dev", si)
		l.etcdIf, l.servIf = append(l.etcdIf, ei), append(l.servIf, si)
		l.setLink(k, "up")
	}
	return l
}

func (l *etcdLab) ip(args ...string) {
	l.t.Helper()
	if out, err := exec.Command(l.ipPath, args...).CombinedOutput(); err != nil {
		l.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// serverAddr is the address server k (from 1) listens on and advertises;
// adminAddr its admin API's. Both are on the servers' loopback.
func (l *etcdLab) serverAddr(k int) string { return fmt.Sprintf("127.0.0.1:71%d7", k) }
func (l *etcdLab) adminAddr(k int) string  { return fmt.Sprintf("127.0.0.1:71%d8", k) }

// endpointsFor lists etcd's members as server k reaches them: at their
// ports, on the etcd end of its own link.
func (l *etcdLab) endpointsFor(k int, etcd *testetcd.Cluster) string {
	eps := make([]string, etcd.Len())
	for i := range eps {
		_, port, err := net.SplitHostPort(etcd.Endpoint(i))
		if err != nil {
			l.t.Fatal(err)
		}
		eps[i] = net.JoinHostPort(fmt.Sprintf("10.78.%d.1", k), port)
	}
	return strings.Join(eps, ",")
}

// server starts server k of the cell (2 s etcd TTL) in the servers'
// namespace, with its admin API on.
func (l *etcdLab) server(k int, etcd *testetcd.Cluster) *testbin.Server {
	l.t.Helper()
	argv := append(append([]string(nil), l.ipPath, "netns", "exec", l.servers), binary, "serve",
		"--data-dir", l.t.TempDir(), "--listen", l.serverAddr(k), "--advertise", l.serverAddr(k),
		"--admin", l.adminAddr(k), "--etcd", l.endpointsFor(k, etcd), "--etcd-prefix", "/test-cell/",
		"--etcd-ttl", "2s")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = cleanEnv()
	return testbin.Start(l.t, wait, cmd)
}

func (l *etcdLab) setLink(k int, state string) {
	l.t.Helper()
	l.ip("-n", l.etcd, "link", "set", l.etcdIf[k-1], state)
	l.ip("-n", l.servers, "link", "set", l.servIf[k-1], state)
}

// cut partitions server k from etcd: both ends of its link go down, so
// packets are dropped, and nothing is reset.
func (l *etcdLab) cut(k int) { l.t.Helper(); l.setLink(k, "down") }

// heal brings server k's link back.
func (l *etcdLab) heal(k int) { l.t.Helper(); l.setLink(k, "up") }

// goClient runs f in a new goroutine whose thread is in the servers'
// namespace, so every connection f opens (the client library dials in the
// goroutine that calls Acquire) reaches the servers on that namespace's
// loopback. The thread is never unlocked: it ends with the goroutine and is
// never reused in the machine's own namespace. The returned channel closes
// when f returns.
func (l *etcdLab) goClient(f func()) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		fd, err := unix.Open("/run/netns/"+l.servers, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			l.t.Errorf("open the servers' namespace: %v", err)
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			l.t.Errorf("enter the servers' namespace: %v", err)
			return
		}
		f()
	}()
	return done
}

// probe sends an ACQUIRE to server k from the servers' namespace and
// returns the ERROR's reason, or an error when the answer is anything else.
func (l *etcdLab) probe(k int) (reason string, err error) {
	<-l.goClient(func() {
		var c net.Conn
		if c, err = net.DialTimeout("tcp", l.serverAddr(k), time.Second); err != nil {
			return
		}
		defer c.Close()
		var frame []byte
		if frame, err = protocol.AppendAcquire(nil, "probe", 1000); err != nil {
			return
		}
		if _, err = c.Write(frame); err != nil {
			return
		}
		var typ, code uint8
		if typ, _, code, reason, err = readFrame(l.t, c, time.Second); err != nil {
			return
		}
		if typ != protocol.MsgError || code != protocol.ErrNotActive.Code {
			err = fmt.Errorf("ACQUIRE answered with message 0x%02x (code 0x%02x), not ERROR 0x03", typ, code)
		}
	})
	return reason, err
}

// cell reads GET /v1/cell from server k's admin API, from the servers'
// namespace. (net/http's transport dials in goroutines of its own, which
// would not be in the namespace; the request is written by hand.)
func (l *etcdLab) cell(k int) (st map[string]any, err error) {
	<-l.goClient(func() {
		var c net.Conn
		if c, err = net.DialTimeout("tcp", l.adminAddr(k), time.Second); err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err = fmt.Fprintf(c, "GET /v1/cell HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", l.adminAddr(k)); err != nil {
			return
		}
		var resp *http.Response
		if resp, err = http.ReadResponse(bufio.NewReader(c), nil); err != nil {
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("GET /v1/cell: %s", resp.Status)
			return
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
	})
	return st, err
}

var logTimeRE = regexp.MustCompile(`^time=(\S+) `)

// loggedAt returns the time of a server's n-th (from 0) log line that
// contains sub, from the line's own timestamp (milliseconds, truncated), or
// the zero time if there is no such line.
func loggedAt(t *testing.T, s *testbin.Server, n int, sub string) time.Time {
	t.Helper()
	for _, line := range s.Log() {
		if !strings.Contains(line, sub) {
			continue
		}
		if n > 0 {
			n--
			continue
		}
		m := logTimeRE.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("no time in the log line %q", line)
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			t.Fatalf("the log line %q: %v", line, err)
		}
		return at
	}
	return time.Time{}
}
