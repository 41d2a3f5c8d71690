package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/client"
	"github.com/monolock/monolock/go/internal/admin"
	"github.com/monolock/monolock/go/internal/listing"
	"github.com/monolock/monolock/go/internal/metrics"
	"github.com/monolock/monolock/go/internal/server"
	"github.com/monolock/monolock/go/internal/testserver"
	"github.com/monolock/monolock/go/pkg/protocol"
)

const wait = 10 * time.Second // turns a hang into a failure; never reached when things work

// stack is a real lock server with its metrics and admin API.
type stack struct {
	srv   *testserver.Server
	addr  string // lock protocol
	admin *httptest.Server
}

func start(t *testing.T, token string) *stack {
	t.Helper()
	m := metrics.New()
	srv := testserver.Start(t, server.Config{Observer: m}, wait)
	m.SetSource(srv.Server)
	hs := httptest.NewServer(admin.Handler(admin.Config{Server: srv.Server, Metrics: m.Handler(), Token: token}))
	t.Cleanup(func() {
		hs.Close()
		require.NoError(t, srv.Stop())
	})
	return &stack{srv: srv, addr: srv.Addr, admin: hs}
}

// waiter acquires name in the background, reporting WAITING on queued.
type waiter struct {
	lock *client.Lock
	err  error
	done chan struct{}
}

func startWaiter(t *testing.T, addr, name string) *waiter {
	t.Helper()
	queued := make(chan struct{}, 1)
	c, err := client.New(client.WithServers(addr), client.WithLease(10*time.Second),
		client.WithOnWaiting(func(string) {
			select {
			case queued <- struct{}{}:
			default:
			}
		}))
	require.NoError(t, err)
	w := &waiter{done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 3*wait)
	go func() {
		defer close(w.done)
		defer cancel()
		w.lock, w.err = c.Acquire(ctx, name)
	}()
	t.Cleanup(func() {
		cancel()
		<-w.done
		if w.lock != nil {
			_ = w.lock.Release()
		}
	})
	select {
	case <-queued:
	case <-w.done:
		t.Fatalf("acquire returned without queueing: %v", w.err)
	case <-time.After(wait):
		t.Fatal("no WAITING")
	}
	return w
}

func scrape(t *testing.T, s *stack) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(s.admin.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return fams
}

// value returns the value of the family's sample with the given labels.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	fam := fams[name]
	require.NotNil(t, fam, "no metric %s", name)
next:
	for _, m := range fam.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	t.Fatalf("no sample of %s with %v", name, labels)
	return 0
}

// Three clients on one lock: the listing shows the holder and the waiters in
// arrival order; a kick ends the holder with 0x02 and promotes the first
// waiter; the metrics follow.
func TestListKickAndMetrics(t *testing.T) {
	s := start(t, "")
	ac := admin.NewClient(s.admin.Listener.Addr().String(), "", nil, wait)
	ctx := context.Background()

	before := scrape(t, s)
	assert.Zero(t, value(t, before, "monolock_grants_total"))
	assert.Zero(t, value(t, before, "monolock_errors_total", "code", "0x02"))

	c, err := client.New(client.WithServers(s.addr), client.WithLease(10*time.Second))
	require.NoError(t, err)
	actx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	held, err := c.Acquire(actx, "deploy/web")
	require.NoError(t, err)
	defer held.Release()
	second := startWaiter(t, s.addr, "deploy/web")
	third := startWaiter(t, s.addr, "deploy/web")

	locks, err := ac.Locks(ctx)
	require.NoError(t, err)
	require.Len(t, locks, 1)
	l := locks[0]
	assert.Equal(t, "deploy/web", l.Name)
	require.NotNil(t, l.Holder)
	assert.Equal(t, held.Token(), l.Holder.Token)
	assert.Equal(t, "anonymous", l.Holder.Identity)
	assert.Equal(t, int64(10000), l.Holder.LeaseMS)
	assert.Contains(t, l.Holder.Remote, "127.0.0.1:")
	assert.WithinDuration(t, time.Now(), l.Holder.Since, time.Minute)
	require.Len(t, l.Waiters, 2)
	ids := []uint64{l.Holder.ID, l.Waiters[0].ID, l.Waiters[1].ID}
	assert.Less(t, ids[0], ids[1], "sessions are numbered in arrival order")
	assert.Less(t, ids[1], ids[2], "the waiters are listed in queue order")
	assert.Zero(t, l.Waiters[0].Token)

	mid := scrape(t, s)
	assert.Equal(t, 1.0, value(t, mid, "monolock_grants_total"))
	assert.Equal(t, 1.0, value(t, mid, "monolock_holders"))
	assert.Equal(t, 2.0, value(t, mid, "monolock_waiters"))
	assert.Equal(t, 3.0, value(t, mid, "monolock_sessions"))

	_, err = ac.Kick(ctx, l.Holder.ID, false)
	require.NoError(t, err)
	select {
	case <-held.Done():
	case <-time.After(wait):
		t.Fatal("the kicked holder did not report its loss")
	}
	var se *client.ServerError
	require.True(t, errors.As(held.Err(), &se), "lost with %v", held.Err())
	assert.Equal(t, uint8(0x02), se.Code)
	assert.ErrorIs(t, held.Err(), client.ErrLockLost)

	select {
	case <-second.done:
	case <-time.After(wait):
		t.Fatal("the first waiter was not promoted")
	}
	require.NoError(t, second.err)
	assert.Equal(t, held.Token()+1, second.lock.Token())

	locks, err = ac.Locks(ctx)
	require.NoError(t, err)
	require.Len(t, locks, 1)
	require.NotNil(t, locks[0].Holder)
	assert.Equal(t, ids[1], locks[0].Holder.ID)
	require.Len(t, locks[0].Waiters, 1)
	assert.Equal(t, ids[2], locks[0].Waiters[0].ID)

	// The promotion is counted just after it is sent: scrape until it shows.
	after := scrape(t, s)
	for deadline := time.Now().Add(wait); value(t, after, "monolock_grants_total") < 2 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		after = scrape(t, s)
	}
	assert.Equal(t, 2.0, value(t, after, "monolock_grants_total"))
	assert.Equal(t, 1.0, value(t, after, "monolock_errors_total", "code", "0x02"))
	assert.Equal(t, 1.0, value(t, after, "monolock_handoff_seconds"), "one hand-over observed")
	assert.Equal(t, 1.0, value(t, after, "monolock_holders"))
	assert.Equal(t, 1.0, value(t, after, "monolock_waiters"))

	// Kicking a session that is gone is a 404, reported as such.
	_, err = ac.Kick(ctx, ids[0], false)
	assert.ErrorContains(t, err, "404")
	_ = third
}

func TestBearerTokenGuardsAPIButNotHealth(t *testing.T) {
	s := start(t, "s3cret")
	get := func(path, auth string) int {
		req, err := http.NewRequest(http.MethodGet, s.admin.URL+path, nil)
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusUnauthorized, get("/v1/locks", ""))
	assert.Equal(t, http.StatusUnauthorized, get("/v1/locks", "Bearer wrong"))
	assert.Equal(t, http.StatusUnauthorized, get("/metrics", ""))
	assert.Equal(t, http.StatusOK, get("/v1/locks", "Bearer s3cret"))
	assert.Equal(t, http.StatusOK, get("/v1/locks", "bearer s3cret"), "the scheme is case-insensitive")
	assert.Equal(t, http.StatusOK, get("/v1/locks", "BEARER s3cret"), "the scheme is case-insensitive")
	assert.Equal(t, http.StatusUnauthorized, get("/v1/locks", "Basic s3cret"))
	assert.Equal(t, http.StatusUnauthorized, get("/v1/locks", "Bearer S3CRET"), "the token is not")
	assert.Equal(t, http.StatusUnauthorized, get("/v1/locks", "Bearer"))
	assert.Equal(t, http.StatusUnauthorized, get("/v1/locks", "s3cret"))
	assert.Equal(t, http.StatusOK, get("/metrics", "Bearer s3cret"))
	assert.Equal(t, http.StatusOK, get("/healthz", ""))
	assert.Equal(t, http.StatusOK, get("/readyz", ""))

	_, err := admin.NewClient(s.admin.URL, "wrong", nil, wait).Locks(context.Background())
	assert.ErrorContains(t, err, "missing or wrong bearer token")
	_, err = admin.NewClient(s.admin.URL, "s3cret", nil, wait).Locks(context.Background())
	assert.NoError(t, err)

	// Once shutdown begins, the server is no longer ready.
	require.NoError(t, s.srv.Shutdown(context.Background()))
	assert.Equal(t, http.StatusServiceUnavailable, get("/readyz", ""))
	assert.Equal(t, http.StatusOK, get("/healthz", ""))
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7118": true, "[::1]:7118": true, "localhost:7118": true, "127.0.0.2:0": true,
		":7118": false, "0.0.0.0:7118": false, "10.0.0.1:7118": false, "[::]:7118": false,
		"example.org:7118": false, "nonsense": false,
	} {
		assert.Equal(t, want, admin.IsLoopback(addr), addr)
	}
}

// do sends a request to the admin API's handler h with the given Host and
// headers and returns the status and body.
func do(t *testing.T, h http.Handler, method, path, host string, header ...string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(method, "http://"+host+path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

// A web page cannot kick a session through a visitor's browser: a form
// POST (cross-origin, or with a form content type) is refused and the
// holder keeps its lock; the monolock commands keep working.
func TestCrossOriginFormKickIsRefused(t *testing.T) {
	s := start(t, "")
	c, err := client.New(client.WithServers(s.addr), client.WithLease(10*time.Second))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	held, err := c.Acquire(ctx, "deploy/web")
	require.NoError(t, err)
	defer held.Release()
	ac := admin.NewClient(s.admin.Listener.Addr().String(), "", nil, wait)
	locks, err := ac.Locks(ctx)
	require.NoError(t, err)
	require.Len(t, locks, 1)
	kick := fmt.Sprintf("%s/v1/sessions/%d/kick", s.admin.URL, locks[0].Holder.ID)

	for _, h := range [][]string{
		{"Origin", "http://evil.example", "Content-Type", "application/x-www-form-urlencoded"},
		{"Origin", "https://evil.example:8443"},
		{"Origin", "null"},
		{"Content-Type", "multipart/form-data; boundary=x"},
		{"Content-Type", "Text/Plain;charset=UTF-8"},
	} {
		req, err := http.NewRequest(http.MethodPost, kick, strings.NewReader("a=b"))
		require.NoError(t, err)
		for i := 0; i < len(h); i += 2 {
			req.Header.Set(h[i], h[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusForbidden, resp.StatusCode, "%v", h)
		assert.Contains(t, string(body), "refused", "%v", h)
		var e admin.ErrorResponse
		require.NoError(t, json.Unmarshal(body, &e))
		assert.NotContains(t, e.Error, "\n")
	}
	assert.NoError(t, held.Err(), "the holder keeps its lock")
	locks, err = ac.Locks(ctx)
	require.NoError(t, err)
	require.Len(t, locks, 1)
	require.NotNil(t, locks[0].Holder)
	assert.Equal(t, held.Token(), locks[0].Holder.Token)

	// A page of another origin on this machine (another port) may not:
	// it is another web application, whatever host it shares.
	self := s.admin.Listener.Addr().String()
	_, port, err := net.SplitHostPort(self)
	require.NoError(t, err)
	for _, h := range [][]string{
		{"Origin", "http://localhost:3000"},
		{"Origin", "http://127.0.0.1:1"},
		{"Origin", "http://localhost:" + port}, // the same port by another name is another origin
		{"Origin", "http://" + self + "/path"},
		{"Origin", "ftp://" + self},
		{"Sec-Fetch-Site", "same-site"},
		{"Sec-Fetch-Site", "cross-site"},
		{"Content-Type", "text/json"},
	} {
		req, err := http.NewRequest(http.MethodPost, kick, nil)
		require.NoError(t, err)
		req.Header.Set(h[0], h[1])
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusForbidden, resp.StatusCode, "%v", h)
	}
	assert.NoError(t, held.Err(), "the holder keeps its lock")

	// Sec-Fetch-Site: none is a request the user made directly, which no
	// page can cause: it passes the check (and fails here for want of the
	// body type only).
	req, err := http.NewRequest(http.MethodPost, kick, nil)
	require.NoError(t, err)
	req.Header.Set("Sec-Fetch-Site", "none")
	req.Header.Set("Content-Type", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.NotContains(t, string(body), "Sec-Fetch-Site", "none is no cross-site request")

	// The API's own page (the dashboard) may, like the commands.
	req, err = http.NewRequest(http.MethodPost, kick, strings.NewReader("{}"))
	require.NoError(t, err)
	req.Header.Set("Origin", "http://"+self)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.Header.Set("Content-Type", "application/json")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	select {
	case <-held.Done():
	case <-time.After(wait):
		t.Fatal("not kicked")
	}
	_, kickErr := ac.Kick(ctx, locks[0].Holder.ID, false)
	assert.ErrorContains(t, kickErr, "404", "monolock kick still reaches the API")
}

// DNS rebinding: a request for another name is refused, so a page cannot
// read the listing; loopback, the listen host and allowed names are served.
func TestForeignHostIsRefused(t *testing.T) {
	s := start(t, "")
	base := admin.Config{Server: s.srv.Server, Metrics: http.NotFoundHandler()}
	h := admin.Handler(base)
	for _, host := range []string{"evil.example", "evil.example:7118", "localhost.evil.example", "10.1.2.3:7118", "[fe80::1]:7118"} {
		code, body := do(t, h, http.MethodGet, "/v1/locks", host)
		assert.Equal(t, http.StatusMisdirectedRequest, code, host)
		assert.Contains(t, body, "--admin-allowed-hosts", host)
		code, _ = do(t, h, http.MethodGet, "/metrics", host)
		assert.Equal(t, http.StatusMisdirectedRequest, code, host)
		code, _ = do(t, h, http.MethodGet, "/healthz", host)
		assert.Equal(t, http.StatusOK, code, "probes may use any name: %s", host)
	}
	for _, host := range []string{"localhost", "LOCALHOST:7118", "127.0.0.1", "127.1.2.3:7118", "[::1]:7118", "[::ffff:127.0.0.1]:1"} {
		code, _ := do(t, h, http.MethodGet, "/v1/locks", host)
		assert.Equal(t, http.StatusOK, code, host)
	}

	allowed := base
	allowed.AllowedHosts = []string{"locks.internal", "192.0.2.7"}
	allowed.Addr = "10.0.0.5:7118"
	h = admin.Handler(allowed)
	for host, want := range map[string]int{
		"locks.internal:7118": http.StatusOK, "Locks.Internal": http.StatusOK, "192.0.2.7": http.StatusOK,
		"10.0.0.5:7118": http.StatusOK, "localhost": http.StatusOK,
		"10.0.0.6:7118": http.StatusMisdirectedRequest, "evil.example": http.StatusMisdirectedRequest,
	} {
		code, _ := do(t, h, http.MethodGet, "/v1/locks", host)
		assert.Equal(t, want, code, host)
	}
	code, _ := do(t, h, http.MethodPost, "/v1/sessions/99/kick", "locks.internal:8080", "Origin", "http://locks.internal:8080")
	assert.Equal(t, http.StatusNotFound, code, "the API's own origin reaches the API")
	code, _ = do(t, h, http.MethodPost, "/v1/sessions/99/kick", "Locks.Internal", "Origin", "https://locks.internal")
	assert.Equal(t, http.StatusNotFound, code, "a TLS proxy that passes Host on: no port is the scheme's default")
	code, _ = do(t, h, http.MethodPost, "/v1/sessions/99/kick", "locks.internal", "Origin", "http://locks.internal:443")
	assert.Equal(t, http.StatusForbidden, code, "port 443 is not port 80")
	code, _ = do(t, h, http.MethodPost, "/v1/sessions/99/kick", "locks.internal", "Origin", "http://locks.internal:8080")
	assert.Equal(t, http.StatusForbidden, code, "an allowed host on another port is another origin")

	// On all interfaces, any IP address is a fine Host, but an Origin must
	// be that same address and port.
	everywhere := base
	everywhere.Addr = "0.0.0.0:7118"
	h = admin.Handler(everywhere)
	code, _ = do(t, h, http.MethodGet, "/v1/locks", "10.1.2.3:7118")
	assert.Equal(t, http.StatusOK, code)
	code, _ = do(t, h, http.MethodGet, "/v1/locks", "evil.example:7118")
	assert.Equal(t, http.StatusMisdirectedRequest, code)
	code, _ = do(t, h, http.MethodPost, "/v1/sessions/99/kick", "10.1.2.3:7118", "Origin", "http://203.0.113.9")
	assert.Equal(t, http.StatusForbidden, code)
	code, _ = do(t, h, http.MethodPost, "/v1/sessions/99/kick", "10.1.2.3:7118", "Origin", "http://10.1.2.3:7118")
	assert.Equal(t, http.StatusNotFound, code)
}

func TestParseAllowedHosts(t *testing.T) {
	got, err := admin.ParseAllowedHosts(" locks.internal, 10.0.0.5,,[::1],fe80::1 ")
	require.NoError(t, err)
	assert.Equal(t, []string{"locks.internal", "10.0.0.5", "[::1]", "fe80::1"}, got)
	for _, bad := range []string{"locks.internal:7118", "http://locks.internal", "[::1]:80", "a b"} {
		_, err := admin.ParseAllowedHosts(bad)
		assert.Error(t, err, bad)
	}
}

// A lock client pointed at the admin port gets an answer at once, not after
// the HTTP header timeout; HTTP requests are served as before.
func TestNotHTTPIsAnsweredAtOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }),
		ReadHeaderTimeout: time.Minute}
	go hs.Serve(admin.NotHTTPListener(ln))
	t.Cleanup(func() { hs.Close() })

	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte{0x01, 0x01, 0x00, 0x00, 0x03, 0xe8, 0x00, 0x01, 'a'}) // an ACQUIRE
	require.NoError(t, err)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	reply, err := io.ReadAll(c)
	require.NoError(t, err, "the connection must be answered and closed well before the header timeout")
	assert.True(t, strings.HasPrefix(string(reply), "HTTP/1.1 400"), "%q", reply)

	resp, err := http.Get("http://" + ln.Addr().String() + "/")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, "ok", string(body))
}

// haServer is a real server reporting an HA cell state.
type haServer struct {
	*server.Server
	st server.CellStatus
}

func (h haServer) Cell() (server.CellStatus, bool) { return h.st, true }

// GET /v1/cell: the cell state with the grace rounded up to whole ms; a
// server without HA answers 404 NotInCell, as JSON; the client tells that
// apart from an admin API that has no /v1/cell.
func TestCellEndpointAndClient(t *testing.T) {
	ctx := context.Background()
	s := start(t, "")
	body, err := func() (string, error) {
		resp, err := http.Get(s.admin.URL + "/v1/cell")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		assert.Equal(t, http.StatusNotFound, resp.StatusCode)
		assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		return string(b), err
	}()
	require.NoError(t, err)
	assert.JSONEq(t, `{"error": "not part of an HA cell"}`, body)
	_, err = admin.NewClient(s.admin.URL, "", nil, wait).Cell(ctx)
	assert.ErrorIs(t, err, admin.ErrStandalone)

	ha := httptest.NewServer(admin.Handler(admin.Config{Server: haServer{s.srv.Server,
		server.CellStatus{Role: "leader", Leader: "10.0.0.1:7117", Grace: 1400*time.Millisecond + time.Microsecond}}}))
	defer ha.Close()
	cell, err := admin.NewClient(ha.URL, "", nil, wait).Cell(ctx)
	require.NoError(t, err)
	assert.Equal(t, admin.CellResponse{Role: "leader", Leader: "10.0.0.1:7117", GraceRemainingMS: 1401}, cell)

	for _, tc := range []struct {
		status int
		ctype  string
		body   string
		want   error
	}{
		{http.StatusNotFound, "application/json", `{"error": "no such endpoint"}`, admin.ErrNoCellAPI}, // before /v1/cell
		{http.StatusNotFound, "text/plain", "404 page not found\n", admin.ErrNoCellAPI},
		{http.StatusNotFound, "text/plain", "not part of an HA cell\n", admin.ErrStandalone}, // the first /v1/cell
	} {
		old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", tc.ctype)
			w.WriteHeader(tc.status)
			_, _ = io.WriteString(w, tc.body)
		}))
		_, err := admin.NewClient(old.URL, "", nil, wait).Cell(ctx)
		old.Close()
		assert.ErrorIs(t, err, tc.want, tc.body)
	}

	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(admin.ErrorResponse{Error: "etcd unreachable"})
	}))
	defer failing.Close()
	_, err = admin.NewClient(failing.URL, "", nil, wait).Cell(ctx)
	var se *admin.StatusError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, http.StatusServiceUnavailable, se.Code)
	assert.EqualError(t, err, "admin API: etcd unreachable (503 Service Unavailable)")
}

// A holder that resets its connection (SO_LINGER 0) is counted in
// monolock_locks_held_back_total{cause="reset"}, as its lock is held back;
// one that closes with a FIN releases and is not counted.
func TestResetHolderIsCounted(t *testing.T) {
	s := start(t, "")
	assert.Zero(t, value(t, scrape(t, s), "monolock_locks_held_back_total", "cause", "reset"))
	hold := func(name string) *net.TCPConn {
		c, err := net.DialTimeout("tcp", s.addr, wait)
		require.NoError(t, err)
		require.NoError(t, c.SetDeadline(time.Now().Add(wait)))
		frame, err := protocol.AppendAcquire(nil, name, 60000)
		require.NoError(t, err)
		_, err = c.Write(frame)
		require.NoError(t, err)
		var typ [1]byte
		_, err = io.ReadFull(c, typ[:])
		require.NoError(t, err)
		require.Equal(t, protocol.MsgAcquired, typ[0])
		_, err = protocol.ReadAcquiredBody(c)
		require.NoError(t, err)
		return c.(*net.TCPConn)
	}
	closer := hold("closed")
	require.NoError(t, closer.Close())
	resetter := hold("reset")
	require.NoError(t, resetter.SetLinger(0))
	require.NoError(t, resetter.Close()) // a reset, not a FIN

	fams := scrape(t, s)
	for deadline := time.Now().Add(wait); value(t, fams, "monolock_locks_held_back_total", "cause", "reset") < 1 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		fams = scrape(t, s)
	}
	assert.Equal(t, 1.0, value(t, fams, "monolock_locks_held_back_total", "cause", "reset"))
	assert.Zero(t, value(t, fams, "monolock_locks_held_back_total", "cause", "lock_delay"))
}

// getBody GETs url and returns the status, the headers and the body.
func getBody(t *testing.T, url string) (int, http.Header, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, string(b)
}

// GET /v1/locks pages by name: ?limit=N locks after ?after=NAME, "next"
// on every page but the last; the client follows it to the end. Bad
// parameters are a 400 that says what is wanted.
func TestLocksArePaged(t *testing.T) {
	s := start(t, "")
	c, err := client.New(client.WithServers(s.addr), client.WithLease(10*time.Second))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	names := []string{"a", "b/1", "b/2", "c", "d", "e", "é"} // byte order
	for _, i := range []int{4, 0, 6, 2, 1, 5, 3} {
		l, err := c.Acquire(ctx, names[i])
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Release() })
	}
	var got []string
	after, pages := "", 0
	for {
		code, _, body := getBody(t, s.admin.URL+"/v1/locks?limit=3&after="+url.QueryEscape(after))
		require.Equal(t, http.StatusOK, code, body)
		var page admin.LocksResponse
		require.NoError(t, json.Unmarshal([]byte(body), &page))
		pages++
		for _, l := range page.Locks {
			got = append(got, l.Name)
		}
		if page.Next == "" {
			assert.NotContains(t, body, `"next"`, "absent on the last page")
			break
		}
		assert.Len(t, page.Locks, 3)
		assert.Equal(t, page.Locks[2].Name, page.Next)
		after = page.Next
	}
	assert.Equal(t, names, got)
	assert.Equal(t, 3, pages)

	all, n, err := admin.NewClient(s.admin.URL, "", nil, wait).LockPages(ctx, 2)
	require.NoError(t, err)
	assert.Len(t, all, len(names))
	assert.Equal(t, 4, n)
	code, _, body := getBody(t, s.admin.URL+"/v1/locks")
	require.Equal(t, http.StatusOK, code)
	assert.NotContains(t, body, `"next"`, "the default page holds them all")

	for q, want := range map[string]string{
		"limit=0":                           `limit \"0\": want a number of locks from 1 to 2000`,
		"limit=-3":                          `limit \"-3\": want a number`,
		"limit=ten":                         `limit \"ten\": want a number`,
		"limit=2001":                        `limit \"2001\": want a number of locks from 1 to 2000`,
		"limit=99999999999999999999":        `want a number of locks`,
		"limit=1&limit=2":                   `limit given 2 times`,
		"after=a&after=b":                   `after given 2 times`,
		"after=" + strings.Repeat("x", 256): `after: 256 bytes; want a lock name (at most 255 bytes)`,
		"after=%zz":                         `bad query string`,
	} {
		code, _, body := getBody(t, s.admin.URL+"/v1/locks?"+q)
		assert.Equal(t, http.StatusBadRequest, code, q)
		assert.Contains(t, body, want, q)
	}
}

// blockingServer is an admin.Server whose listings wait until released,
// to hold listings in progress.
type blockingServer struct {
	admin.Server
	entered chan struct{}
	release chan struct{}
}

func (b blockingServer) LockPage(after string, limit int) ([]admin.Lock, bool) {
	b.entered <- struct{}{}
	<-b.release
	return b.Server.LockPage(after, limit)
}

// At most MaxListings listings are in progress; one more gets a 503 at
// once, with Retry-After and the connection closed, not a place in a
// queue. Once they are done, listing works again.
func TestListingsAtOnceAreCapped(t *testing.T) {
	s := start(t, "")
	bs := blockingServer{Server: s.srv.Server, entered: make(chan struct{}), release: make(chan struct{})}
	hs := httptest.NewServer(admin.Handler(admin.Config{Server: bs}))
	defer hs.Close()
	done := make(chan int, admin.MaxListings)
	for range admin.MaxListings {
		go func() {
			resp, err := http.Get(hs.URL + "/v1/locks")
			if err != nil {
				done <- 0
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
	}
	for range admin.MaxListings {
		select {
		case <-bs.entered:
		case <-time.After(wait):
			t.Fatal("the listings did not start")
		}
	}
	resp, err := http.Get(hs.URL + "/v1/locks")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	assert.True(t, resp.Close, "the refused request's connection is closed")
	assert.Contains(t, string(body), "4 lock listings are in progress")
	code, _, _ := getBody(t, hs.URL+"/healthz")
	assert.Equal(t, http.StatusOK, code, "only listings are capped")

	close(bs.release)
	for range admin.MaxListings {
		assert.Equal(t, http.StatusOK, <-done)
	}
	go func() { <-bs.entered }()
	code, _, _ = getBody(t, hs.URL+"/v1/locks")
	assert.Equal(t, http.StatusOK, code)
}

// Over the limit, a new connection is closed at once, before it is read,
// and counted, unless an open one has waited for a request for
// EvictAfter: then the new one takes its place. A connection inside a
// request keeps its place.
func TestLimitListenerMakesRoomForANewRequest(t *testing.T) {
	s := start(t, "")
	bs := blockingServer{Server: s.srv.Server, entered: make(chan struct{}), release: make(chan struct{})}
	var dropped atomic.Int64
	// serve serves the admin API on a listener with at most 2 connections.
	serve := func(evictAfter time.Duration) string {
		inner, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ln := admin.LimitListener(inner, 2, evictAfter, func() { dropped.Add(1) })
		hs := &http.Server{Handler: admin.Handler(admin.Config{Server: bs}), ConnContext: admin.ConnContext}
		go func() { _ = hs.Serve(ln) }()
		t.Cleanup(func() { hs.Close() })
		return inner.Addr().String()
	}
	addr := serve(time.Hour)

	request := func(c net.Conn, path string) (string, error) {
		require.NoError(t, c.SetDeadline(time.Now().Add(wait)))
		if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: localhost\r\n\r\n"); err != nil {
			return "", err
		}
		b := make([]byte, 4096)
		n, err := c.Read(b)
		return string(b[:n]), err
	}
	dial := func() net.Conn {
		c, err := net.DialTimeout("tcp", addr, wait)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	closed := func(c net.Conn) bool {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(wait)))
		_, err := c.Read(make([]byte, 1))
		return err != nil
	}

	// Two connections that send nothing take both places; a third finds
	// none that has waited long enough (an hour here), and is closed.
	hogs := []net.Conn{dial(), dial()}
	got, err := request(dial(), "/healthz")
	assert.Empty(t, got, "closed before any answer")
	assert.Error(t, err)
	assert.Equal(t, int64(1), dropped.Load())

	// Once they have waited long enough (here 50 ms; the sleep leaves the
	// listener time to accept them on a loaded machine), a probe takes the
	// place of the one that waited longest, and is answered.
	const evictAfter = 50 * time.Millisecond
	addr = serve(evictAfter)
	hogs = []net.Conn{dial(), dial()}
	time.Sleep(time.Second)
	got, err = request(dial(), "/healthz")
	require.NoError(t, err)
	assert.Contains(t, got, "HTTP/1.1 200 OK")
	assert.True(t, closed(hogs[0]), "the first idle connection was not displaced")
	assert.Equal(t, int64(2), dropped.Load())

	// A connection inside a request (a listing that waits) keeps its
	// place, however long: the next one displaces the other.
	inside := dial()
	listing := make(chan string, 1)
	go func() {
		got, _ := request(inside, "/v1/locks")
		listing <- got
	}()
	<-bs.entered
	time.Sleep(time.Second)
	got, err = request(dial(), "/readyz")
	require.NoError(t, err)
	assert.Contains(t, got, "HTTP/1.1 200 OK")
	close(bs.release)
	assert.Contains(t, <-listing, "HTTP/1.1 200 OK", "the listing was cut off")
}

// bigServer lists locks with as many sessions as a lock's listing names,
// each with a long identity.
type bigServer struct{ admin.Server }

func (bigServer) LockPage(after string, limit int) ([]admin.Lock, bool) {
	var page []admin.Lock
	for i := 0; i < 300 && len(page) < limit; i++ {
		name := fmt.Sprintf("lock/%03d", i)
		if name <= after {
			continue
		}
		lk := admin.Lock{Name: name, Mode: admin.ModeShared, HoldersTotal: 17500}
		for j := range admin.MaxListedSessions {
			lk.Holders = append(lk.Holders, admin.Session{ID: uint64(j), Mode: admin.ModeShared,
				Identity: "uri:spiffe://example.org/" + strings.Repeat("x", 150), Remote: "[2001:db8::1]:54321"})
		}
		page = append(page, lk)
	}
	return page, false
}

// A page ends once its JSON passes MaxPageBytes, and says where the next
// one begins; a lock with 17,500 holders lists MaxListedSessions of them
// and counts them all.
func TestLockPageIsBoundedInBytes(t *testing.T) {
	hs := httptest.NewServer(admin.Handler(admin.Config{Server: bigServer{}}))
	t.Cleanup(hs.Close)
	code, _, body := getBody(t, hs.URL+"/v1/locks?limit=2000")
	require.Equal(t, http.StatusOK, code)
	assert.Less(t, len(body), admin.MaxPageBytes+200<<10, "at most the budget and one lock")
	var page admin.LocksResponse
	require.NoError(t, json.Unmarshal([]byte(body), &page))
	require.NotEmpty(t, page.Locks)
	assert.Less(t, len(page.Locks), 300, "the budget ended the page")
	assert.Equal(t, page.Locks[len(page.Locks)-1].Name, page.Next)
	assert.Equal(t, 17500, page.Locks[0].HoldersTotal)
	assert.Len(t, page.Locks[0].Holders, admin.MaxListedSessions)
}

// One lock's sessions beyond the MaxListedSessions that /v1/locks names
// are paged by kind: 150 shared holders and 3 waiters on one name.
func TestLockSessionsArePaged(t *testing.T) {
	s := start(t, "")
	c, err := client.New(client.WithServers(s.addr), client.WithLease(10*time.Second))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 3*wait)
	defer cancel()
	const holders = admin.MaxListedSessions + 50
	tokens := map[uint64]bool{}
	for range holders {
		l, err := c.Acquire(ctx, "pool", client.Shared())
		require.NoError(t, err)
		tokens[l.Token()] = true
		t.Cleanup(func() { _ = l.Release() })
	}
	for range 3 {
		startWaiter(t, s.addr, "pool") // exclusive claims queue behind the shared holders
	}
	require.Eventually(t, func() bool { _, _, w := s.srv.Counts(); return w == 3 }, wait, 10*time.Millisecond)

	var seen []uint64
	after, pages := "", 0
	for {
		code, _, body := getBody(t, s.admin.URL+"/v1/lock/sessions?name=pool&kind=holders&limit=64&after="+after)
		require.Equal(t, http.StatusOK, code, body)
		var page listing.SessionPage
		require.NoError(t, json.Unmarshal([]byte(body), &page))
		pages++
		for _, h := range page.Sessions {
			seen = append(seen, h.Token)
			assert.NotEmpty(t, h.Remote)
		}
		if page.Next == 0 {
			break
		}
		assert.Len(t, page.Sessions, 64)
		after = strconv.FormatUint(page.Next, 10)
	}
	assert.Equal(t, 3, pages)
	assert.Len(t, seen, holders)
	assert.True(t, slices.IsSorted(seen), "in token order")
	for _, tok := range seen {
		assert.True(t, tokens[tok])
	}

	code, _, body := getBody(t, s.admin.URL+"/v1/lock/sessions?name=pool&kind=waiters&limit=2")
	require.Equal(t, http.StatusOK, code, body)
	var w listing.SessionPage
	require.NoError(t, json.Unmarshal([]byte(body), &w))
	require.Len(t, w.Sessions, 2)
	assert.Equal(t, w.Sessions[1].Arrival, w.Next)
	code, _, body = getBody(t, s.admin.URL+"/v1/lock/sessions?name=pool&kind=waiters&after="+strconv.FormatUint(w.Next, 10))
	require.Equal(t, http.StatusOK, code, body)
	w = listing.SessionPage{}
	require.NoError(t, json.Unmarshal([]byte(body), &w))
	assert.Len(t, w.Sessions, 1)
	assert.Zero(t, w.Next)

	for _, q := range []string{"name=pool", "name=pool&kind=all", "kind=holders", "name=pool&kind=holders&after=x",
		"name=pool&kind=holders&limit=0", "name=pool&kind=holders&kind=waiters"} {
		code, _, body := getBody(t, s.admin.URL+"/v1/lock/sessions?"+q)
		assert.Equal(t, http.StatusBadRequest, code, "%s: %s", q, body)
	}
	code, _, _ = getBody(t, s.admin.URL+"/v1/lock/sessions?name=nobody&kind=holders")
	assert.Equal(t, http.StatusNotFound, code)
}
