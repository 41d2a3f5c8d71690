package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/admin"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// tokenFile writes an admin token and returns its file.
func tokenFile(t *testing.T, token string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(f, []byte(token+"\n"), 0o600))
	return f
}

// scrapeCounter reads one sample of the admin API's /metrics.
func scrapeCounter(t *testing.T, adminAddr, token, name, label, value string) float64 {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+adminAddr+"/metrics", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: wait}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	require.Contains(t, fams, name)
	for _, m := range fams[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label && l.GetValue() == value {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s{%s=%q}", name, label, value)
	return 0
}

// Under `ulimit -n 400` (--max-sessions defaults to 336), 1,000 admin
// connections that each send GET /healthz and stay open, as the attack
// review's 420 did, get at most --admin-max-connections (16) answers: the
// others are closed at once, none waits. The lock port keeps every one of
// its descriptors: all 336 sessions connect and acquire, and the server
// never fails an accept. A bearer token is configured and changes nothing
// (the connections are counted before any request is read).
//
// Before the admin limit, the server accepted admin connections up to the
// file limit: about 330 of them got an answer (more than 16), and the lock
// sessions then found no descriptor left (accept4: too many open files),
// so their ACQUIREs went unanswered and this test failed.
func TestIdleAdminConnectionsLeaveTheLockPortItsDescriptors(t *testing.T) {
	const (
		nofile      = 400
		maxSessions = nofile - fdReserve
		adminConns  = 1000
	)
	token := "s3cret"
	p := serveWithFileLimit(t, nofile, "--admin", "127.0.0.1:0", "--admin-token-file", tokenFile(t, token))
	p.WaitLog(0, wait, fmt.Sprintf(`msg="session limit" max_sessions=%d `, maxSessions))
	adminAddr := p.AdminAddr

	conns := make([]net.Conn, 0, adminConns)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range adminConns {
		c, err := net.DialTimeout("tcp", adminAddr, wait)
		require.NoError(t, err, "the kernel completes the handshake; the server closes what it will not serve")
		conns = append(conns, c)
		// A write to a connection the server closed may fail: that is
		// the refusal, not an error of the test.
		_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
	}
	// Every connection is answered or closed: none is kept waiting.
	var mu sync.Mutex
	var answered []net.Conn
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() {
			_ = c.SetReadDeadline(time.Now().Add(wait))
			b := make([]byte, 512)
			n, err := c.Read(b)
			if n > 0 {
				assert.True(t, strings.HasPrefix(string(b[:n]), "HTTP/1.1 200 OK"), "%q", b[:n])
				mu.Lock()
				answered = append(answered, c)
				mu.Unlock()
				return
			}
			var ne net.Error
			assert.False(t, errors.As(err, &ne) && ne.Timeout(), "an admin connection neither answered nor closed: queued")
		})
	}
	wg.Wait()
	// More than defaultAdminConns may have been answered: a connection
	// that had its answer and waited idle gives its place to a new one
	// (admin.LimitListener). None waited in a queue, as checked above.
	assert.NotEmpty(t, answered)

	// With the admin connections still open: every session the lock port
	// allows connects and is granted its lock.
	for i := range maxSessions {
		c := rawDial(t, p.Addr)
		c.acquire(t, fmt.Sprintf("lock/%d", i))
		require.Equal(t, protocol.MsgAcquired, c.readType(t), "lock session %d of %d", i+1, maxSessions)
	}
	assert.NotContains(t, p.LogText(), "accept failed")
	p.WaitLog(0, wait, `msg="admin connection limit reached; closing connections" max_connections=16`)
	assert.LessOrEqual(t, strings.Count(p.LogText(), `msg="admin connection limit reached; closing connections" max_connections`), 5,
		"the log line is rate-limited")

	// Once the idle ones go, the admin API serves again, and has counted
	// every connection it closed.
	for _, c := range answered {
		c.Close()
	}
	var refused float64
	deadline := time.Now().Add(wait)
	for {
		req, err := http.NewRequest(http.MethodGet, "http://"+adminAddr+"/healthz", nil)
		require.NoError(t, err)
		resp, err := (&http.Client{Timeout: wait}).Do(req)
		if err == nil {
			resp.Body.Close()
			refused = scrapeCounter(t, adminAddr, token, "monolock_connections_refused_total", "reason", "admin_max_connections")
			break
		}
		require.True(t, time.Now().Before(deadline), "the admin API did not serve again: %v", err)
		time.Sleep(20 * time.Millisecond)
	}
	assert.GreaterOrEqual(t, refused, float64(adminConns-len(answered)))
}

// procStatusKB reads a "VmRSS:"-style field of /proc/PID/status, in KiB.
func procStatusKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			require.NoError(t, err, line)
			return kb
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// holdLocks opens n sessions, each holding its own lock, named with
// nameLen bytes, with a lease long enough to need no heartbeat.
func holdLocks(t *testing.T, addr string, n, nameLen int) {
	t.Helper()
	const workers = 8
	errs := make(chan error, workers)
	conns := make([][]net.Conn, workers)
	t.Cleanup(func() {
		for _, cs := range conns {
			for _, c := range cs {
				c.Close()
			}
		}
	})
	for w := range workers {
		go func() {
			errs <- func() error {
				for i := w; i < n; i += workers {
					c, err := net.DialTimeout("tcp", addr, wait)
					if err != nil {
						return err
					}
					conns[w] = append(conns[w], c)
					prefix := fmt.Sprintf("lock/%06d/", i)
					frame, err := protocol.AppendAcquire(nil, prefix+strings.Repeat("x", nameLen-len(prefix)), 600000)
					if err != nil {
						return err
					}
					_ = c.SetDeadline(time.Now().Add(wait))
					if _, err := c.Write(frame); err != nil {
						return err
					}
					var typ [1]byte
					if _, err := io.ReadFull(c, typ[:]); err != nil {
						return err
					}
					if typ[0] != protocol.MsgAcquired {
						return fmt.Errorf("session %d: reply type 0x%02x", i, typ[0])
					}
					if _, err := protocol.ReadAcquiredBody(c); err != nil {
						return err
					}
				}
				return nil
			}()
		}()
	}
	for range workers {
		require.NoError(t, <-errs)
	}
}

// dialNonReading connects with a receive buffer of 4 KiB (set before the
// handshake, so the window stays small) and sends one request; the test
// never reads the answer.
func dialNonReading(t *testing.T, addr, request string) *net.TCPConn {
	t.Helper()
	d := net.Dialer{Timeout: wait, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		return errors.Join(err, serr)
	}}
	c, err := d.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	_, _ = io.WriteString(c, request) // may fail on a connection refused at the limit
	return c.(*net.TCPConn)
}

// heard reports, without reading it, whether c has anything from the
// server yet: the first bytes of an answer, or its close.
func heard(c *net.TCPConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return true
	}
	got := false
	_ = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		got = n > 0 || err == nil || !errors.Is(err, syscall.EAGAIN) // n == 0, no error: closed
		return true                                                  // never wait for more
	})
	return got
}

// 100 requests for the largest lock-listing page that never read their
// answers (4 KiB receive buffers) against 15,000 sessions of 255-byte lock
// names (the attack review's figures: 7.9 MB as one listing). The server
// builds at most MaxListings pages at once (the others are refused at
// once, at the listing or the connection limit), each at most
// MaxPageLimit locks, so its peak RSS may grow by at most
//
//	MaxListings × page bytes × 4 (the struct copies, the JSON encoder's
//	buffer, which grows by doubling, and its indented copy)
//	+ the RSS before (GOGC=100 lets the heap reach twice its live size
//	  before a collection, whatever allocates)
//	+ 32 MiB (goroutines and buffers of 100 connections, runtime)
//
// where page bytes are MaxPageLimit times the JSON bytes of one lock. The
// RSS is read from /proc of a real `monolock serve` (VmHWM, the peak, so
// no sample can miss it), which counts everything the process holds and
// nothing of the test's own 15,000 client connections. The peak is read
// once every request has been answered or closed: an old server builds
// the whole listing before it writes the first byte.
//
// The old server (no paging, no listing or connection limit) built the
// whole table for each of the 100 and held it while the peer did not
// read: its peak grew by over 2 GB (bound here: about 250 MB).
func TestNonReadingListingsKeepMemoryBounded(t *testing.T) {
	const nameLen, requests = protocol.MaxNameLen, 100
	var lim syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim))
	n := min(15000, int(lim.Cur)-fdReserve-2*requests)
	if n < 4*admin.MaxPageLimit {
		t.Skipf("the open file limit (%d) is too low for sessions in several pages", lim.Cur)
	}
	p := startServe(t, nil, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0")
	pid := p.Cmd.Process.Pid
	holdLocks(t, p.Addr, n, nameLen)

	// A first walk through the pages: the server's steady state includes
	// listing, and the bytes of one lock in a page give the page size.
	ctx, cancel := context.WithTimeout(context.Background(), 4*wait)
	defer cancel()
	ac := admin.NewClient(p.admin, "", nil, 4*wait)
	locks, pages, err := ac.LockPages(ctx, admin.MaxPageLimit)
	require.NoError(t, err)
	require.NotEmpty(t, locks)
	one, err := json.MarshalIndent(admin.LocksResponse{Locks: locks[:1]}, "", "  ")
	require.NoError(t, err)
	pageBytes := int64(admin.MaxPageLimit * len(one))
	rssBefore := procStatusKB(t, pid, "VmRSS") << 10
	bound := admin.MaxListings*pageBytes*4 + rssBefore + 32<<20

	request := fmt.Sprintf("GET /v1/locks?limit=%d HTTP/1.1\r\nHost: localhost\r\n\r\n", admin.MaxPageLimit)
	conns := make([]*net.TCPConn, requests)
	for i := range conns {
		conns[i] = dialNonReading(t, p.admin, request)
	}
	deadline := time.Now().Add(4 * wait)
	for _, c := range conns {
		for !heard(c) {
			require.True(t, time.Now().Before(deadline), "a listing request was neither answered nor refused")
			time.Sleep(10 * time.Millisecond)
		}
	}
	time.Sleep(time.Second) // let the last writes block, as they would
	peak := procStatusKB(t, pid, "VmHWM") << 10
	t.Logf("%d locks, page %d bytes; RSS before %d MiB, peak %d MiB, growth %d MiB, bound %d MiB",
		n, pageBytes, rssBefore>>20, peak>>20, (peak-rssBefore)>>20, bound>>20)
	assert.Less(t, peak-rssBefore, bound, "peak RSS growth")

	// The listing was read in pages of at most MaxPageLimit locks, each
	// ended too once its JSON passed MaxPageBytes, every lock once.
	assert.Len(t, locks, n)
	assert.GreaterOrEqual(t, pages, (n+admin.MaxPageLimit-1)/admin.MaxPageLimit)
	assert.GreaterOrEqual(t, pages, int(int64(n)*int64(len(one))/(admin.MaxPageBytes+int64(len(one)))), "pages of about MaxPageBytes")
}

// A peer that needs no token takes every admin connection and keeps
// taking them (idle connections, each reopened as soon as it is closed),
// yet every health probe is answered: the orchestrator never restarts a
// healthy server, and no holder loses its lock for it.
func TestHealthAnswersThroughAConnectionHog(t *testing.T) {
	p := serveWithFileLimit(t, 1024, "--admin", "127.0.0.1:0", "--admin-token-file", tokenFile(t, "s3cret"))
	p.WaitLog(0, wait, `msg="admin listening"`)

	// The hog: defaultAdminConns idle connections, each reopened when the
	// server closes it, until the probes are done (bounded in time and in
	// connections).
	done := make(chan struct{})
	var hogs sync.WaitGroup
	for range defaultAdminConns {
		hogs.Go(func() {
			for range 1000 {
				c, err := net.DialTimeout("tcp", p.AdminAddr, wait)
				if err != nil {
					return
				}
				closed := make(chan struct{})
				go func() { _, _ = c.Read(make([]byte, 1)); close(closed) }()
				select {
				case <-done:
					c.Close()
					return
				case <-closed:
					c.Close()
				}
			}
		})
	}
	t.Cleanup(func() { close(done); hogs.Wait() })
	time.Sleep(time.Second) // every place taken, and waited on

	probe := &http.Client{Timeout: 2 * time.Second} // as a liveness probe's
	for i := range 10 {
		resp, err := probe.Get("http://" + p.AdminAddr + "/healthz")
		require.NoError(t, err, "probe %d", i)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "probe %d", i)
		time.Sleep(300 * time.Millisecond)
	}
}
