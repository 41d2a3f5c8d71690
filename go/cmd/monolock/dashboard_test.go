package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/admin"
	"github.com/monolock/monolock/go/internal/testcerts"
	"github.com/monolock/monolock/go/internal/testtools"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// The dashboard tests drive a real browser (headless Chromium over the
// DevTools protocol) against a real `monolock serve`.

// browser is a headless Chromium tab that records what must never happen on
// the dashboard: a dialog (alert, confirm, prompt), an exception, a console
// error or a security message (a CSP violation).
type browser struct {
	t   *testing.T
	ctx context.Context

	mu       sync.Mutex
	dialogs  []string
	problems []string
	ignore   []string // messages containing one of these are expected (the foreign page's)
}

// newBrowser starts Chromium with a fresh profile. Every step is bounded by
// the test's deadline (the context), never by a fixed sleep.
func newBrowser(t *testing.T, deadline time.Duration) *browser {
	t.Helper()
	exe := testtools.Require(t, "chromium")
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.NoSandbox, // Chromium refuses to run as root with its sandbox
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 460), // also the screenshot's size
		chromedp.Flag("hide-scrollbars", true),
	)
	ctx, cancelTimeout := context.WithTimeout(context.Background(), deadline)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
		cancelTimeout()
	})
	b := &browser{t: t, ctx: bctx}
	require.NoError(t, chromedp.Do(bctx), "starting chromium")

	// Subscribed before any page loads, so nothing is missed.
	dialogs := chromedp.Events(bctx, page.JavascriptDialogOpening)
	console := chromedp.Console(bctx)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.dialogs = append(b.dialogs, fmt.Sprintf("%s(%q) on %s", ev.Type, ev.Message, ev.URL))
			b.mu.Unlock()
			// Dismissed, so that the page and the test go on.
			_, _ = chromedp.Call(bctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	go func() {
		for m, err := range console {
			if err != nil {
				return
			}
			bad := m.IsException() || m.Type == "error" || m.Source == "security"
			// A refused request is logged by the network part of the
			// browser: the 401 before the token is pasted, on purpose.
			if !bad || m.Source == "network" {
				continue
			}
			b.mu.Lock()
			b.problems = append(b.problems, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line+1))
			b.mu.Unlock()
		}
	}()
	return b
}

func (b *browser) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	require.NoError(b.t, chromedp.Do(b.ctx, steps...))
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](b *browser, js string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](js))
	require.NoError(b.t, err, js)
	return v
}

// waitFor polls a JavaScript condition until it holds; on a timeout the
// page's text says what it showed instead.
func (b *browser) waitFor(what, cond string) {
	b.t.Helper()
	deadline := time.Now().Add(wait)
	for {
		if eval[bool](b, "!!("+cond+")") {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("the page did not show %s within %s; it shows:\n%s", what, wait, eval[string](b, "document.body.innerText"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rows is the lock table as text, one []string of cells per row.
func (b *browser) rows() [][]string {
	b.t.Helper()
	return eval[[][]string](b, `[...document.querySelectorAll("#rows tr")].map(tr => [...tr.cells].map(c => c.textContent))`)
}

// kick clicks a session's kick button twice (the first click arms it).
func (b *browser) kick(session uint64) {
	b.t.Helper()
	btn := chromedp.CSS(fmt.Sprintf(`button.kick[data-session="%d"]`, session))
	b.do(chromedp.Click(btn))
	b.waitFor("the armed kick button", fmt.Sprintf(`document.querySelector('button.kick[data-session="%d"]').classList.contains("armed")`, session))
	b.do(chromedp.Click(btn))
}

// noProblems fails the test for each dialog and each problem recorded so
// far that is not expected.
func (b *browser) noProblems() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	assert.Empty(b.t, b.dialogs, "a dialog opened: a script ran that should not have")
next:
	for _, p := range b.problems {
		for _, ig := range b.ignore {
			if strings.Contains(p, ig) {
				continue next
			}
		}
		b.t.Errorf("the browser reported: %s", p)
	}
}

// acquireAs connects to addr (TLS with a client certificate for cn when ca
// is set), sends ACQUIRE for name with a lease long enough that the test
// needs no heartbeats, and checks the first reply.
func acquireAs(t *testing.T, addr, name, cn string, ca *testcerts.CA, want uint8) net.Conn {
	t.Helper()
	return acquireWithValue(t, addr, name, cn, "", ca, want)
}

// acquireWithValue is acquireAs for a claim with value (none when "").
func acquireWithValue(t *testing.T, addr, name, cn, value string, ca *testcerts.CA, want uint8) net.Conn {
	t.Helper()
	var c net.Conn
	var err error
	if ca != nil {
		leaf := ca.Issue(t, testcerts.Spec{CN: cn})
		c, err = tls.DialWithDialer(&net.Dialer{Timeout: wait}, "tcp", addr,
			&tls.Config{Certificates: []tls.Certificate{leaf.TLS}, RootCAs: ca.Pool()})
	} else {
		c, err = net.DialTimeout("tcp", addr, wait)
	}
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	frame, err := protocol.AppendAcquire(nil, name, 60_000)
	if value != "" {
		frame, err = protocol.AppendAcquireV3(nil, name, 60_000, protocol.ModeExclusive, 0, []byte(value))
	}
	require.NoError(t, err)
	_, err = c.Write(frame)
	require.NoError(t, err)
	typ, _, code, reason, err := readFrame(t, c, wait)
	require.NoError(t, err)
	require.Equal(t, want, typ, "reply to ACQUIRE %q as %q (error 0x%02x %s)", name, cn, code, reason)
	return c
}

// silent reports whether c has received nothing (for a short while): a
// holder that was not kicked.
func silent(t *testing.T, c net.Conn) bool {
	t.Helper()
	_, _, _, _, err := readFrame(t, c, 300*time.Millisecond)
	var ne net.Error
	return err != nil && errors.As(err, &ne) && ne.Timeout()
}

// listLocks reads the listing from the API, every page.
func listLocks(t *testing.T, adminAddr, token string) []admin.Lock {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	locks, err := admin.NewClient(adminAddr, token, nil, wait).Locks(ctx)
	require.NoError(t, err)
	return locks
}

// sessionsByIdentity reads the listing from the API: identity -> session id.
func sessionsByIdentity(t *testing.T, adminAddr, token string) map[string]uint64 {
	t.Helper()
	ids := map[string]uint64{}
	for _, l := range listLocks(t, adminAddr, token) {
		if l.Holder != nil {
			ids[l.Holder.Identity] = l.Holder.ID
		}
		for _, w := range l.Waiters {
			ids[w.Identity] = w.ID
		}
	}
	return ids
}

// TestDashboard runs the dashboard's browser tests in one Chromium (it
// takes seconds to start on a loaded machine), each against its own server.
func TestDashboard(t *testing.T) {
	b := newBrowser(t, 90*time.Second)
	for _, c := range []struct {
		name string
		run  func(*testing.T, *browser)
	}{
		{"LocksAndKicks", testDashboardLocksAndKicks},
		{"BearerToken", testDashboardWithBearerToken},
		{"SharedLocks", testDashboardSharedLocks},
	} {
		t.Run(c.name, func(t *testing.T) {
			b.use(t)
			c.run(t, b)
		})
	}
}

// use makes t the test that b's checks report to, with a clean record.
func (b *browser) use(t *testing.T) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.t = t
	b.dialogs, b.problems, b.ignore = nil, nil, nil
}

// The dashboard of a server with mutual TLS, so that identities (the
// certificates' common names) can carry markup too: it lists every lock
// across the listing's pages with holder and queue, shows the totals, and
// its kick button ends the holder and the waiter is shown holding. A lock
// name and identities made of HTML and script read exactly as written and
// run nothing. A page of another origin on this machine cannot kick.
func testDashboardLocksAndKicks(t *testing.T, b *browser) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "dashboard-ca")
	cert, key := ca.Issue(t, testcerts.Spec{CN: "server", Server: true}).Write(t, dir, "server")
	p := startServe(t, nil, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
		"--tls-cert", cert, "--tls-key", key, "--tls-client-ca", ca.Write(t, dir, "ca"))

	const (
		evilName  = `<img src=x onerror=alert(1)>`
		evilCN    = `<script>alert(2)</script>`
		markupCN  = `<b onmouseover="alert(3)">ops</b> & "co"`
		otherName = "jobs/nightly"
		evilValue = `<a href="javascript:alert(4)">10.0.0.7:8080</a>`
	)
	deployer := acquireWithValue(t, p.Addr, "deploy/web", "deployer", evilValue, ca, protocol.MsgAcquired)
	next := acquireAs(t, p.Addr, "deploy/web", markupCN, ca, protocol.MsgWaiting)
	acquireAs(t, p.Addr, evilName, evilCN, ca, protocol.MsgAcquired)
	cron := acquireAs(t, p.Addr, otherName, "cron", ca, protocol.MsgAcquired)
	acquireAs(t, p.Addr, otherName, "cron-2", ca, protocol.MsgWaiting)
	ids := sessionsByIdentity(t, p.admin, "")

	// Two locks a page, so that three locks take two pages.
	b.do(chromedp.Navigate("http://" + p.admin + "/?limit=2"))
	b.waitFor("every lock, from both pages", `document.getElementById("paging").textContent === "3 locks in 2 pages of up to 2"`)
	b.waitFor("five sessions", `document.querySelectorAll("#rows tr").length === 5`)
	rows := b.rows()
	// Sorted by name (byte order: '<' < 'd' < 'j'), holder first, then the queue.
	want := [][]string{
		{evilName, "held", fmt.Sprint(ids["cn:"+evilCN]), "cn:" + evilCN},
		{"deploy/web", "held", fmt.Sprint(ids["cn:deployer"]), "cn:deployer"},
		{"", "waiting #1", fmt.Sprint(ids["cn:"+markupCN]), "cn:" + markupCN},
		{otherName, "held", fmt.Sprint(ids["cn:cron"]), "cn:cron"},
		{"", "waiting #1", fmt.Sprint(ids["cn:cron-2"]), "cn:cron-2"},
	}
	require.Len(t, rows, len(want))
	for i, w := range want {
		assert.Equal(t, w, rows[i][:4], "row %d", i)
		assert.Regexp(t, `^127\.0\.0\.1:\d+$`, rows[i][4], "row %d: remote", i)
		if w[1] == "held" {
			assert.Regexp(t, `^\d+$`, rows[i][5], "row %d: a holder has a token", i)
		} else {
			assert.Empty(t, rows[i][5], "row %d: a waiter has no token", i)
		}
		assert.Equal(t, "60s", rows[i][6], "row %d: lease", i)
		assert.Regexp(t, `^\d+s$`, rows[i][7], "row %d: held or waiting for", i)
		if i == 1 {
			assert.Equal(t, evilValue, rows[i][8], "the holder's value, as text")
		} else {
			assert.Empty(t, rows[i][8], "row %d: no value", i)
		}
	}
	assert.Zero(t, eval[int](b, `document.querySelectorAll("#rows *:not(tr):not(td):not(button)").length`),
		"no element but the table's own: markup in names stayed text")

	// Totals, and a grant rate once there are two samples.
	b.waitFor("a grant rate", `/^\d+\.\d$/.test(document.getElementById("t-rate").textContent)`)
	for id, v := range map[string]string{"t-sessions": "5", "t-locks": "3", "t-holders": "3", "t-waiters": "2", "t-grants": "3", "t-kicks": "0"} {
		assert.Equal(t, v, eval[string](b, `document.getElementById("`+id+`").textContent`), id)
	}
	assert.Equal(t, "standalone server", eval[string](b, `document.getElementById("cell").textContent`))

	if path := os.Getenv("MONOLOCK_DASHBOARD_SCREENSHOT"); path != "" {
		png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100)) // 100: PNG
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, png, 0o644))
		t.Logf("wrote %s (%d bytes)", path, len(png))
	}

	// Kick the holder of deploy/web: it hears 0x02, the waiter is promoted,
	// and the page shows the waiter holding with its new token.
	b.kick(ids["cn:deployer"])
	b.waitFor("the kick's outcome", `document.getElementById("notice").textContent.startsWith("kicked session `+fmt.Sprint(ids["cn:deployer"])+`")`)
	typ, _, code, _, err := readFrame(t, deployer, wait)
	require.NoError(t, err)
	assert.Equal(t, protocol.MsgError, typ)
	assert.Equal(t, protocol.ErrAdminClosed.Code, code)
	typ, token, _, _, err := readFrame(t, next, wait)
	require.NoError(t, err)
	require.Equal(t, protocol.MsgAcquired, typ, "the waiter is promoted")
	b.waitFor("the waiter holding deploy/web", `document.querySelectorAll("#rows tr").length === 4`)
	rows = b.rows()
	assert.Equal(t, []string{"deploy/web", "held", fmt.Sprint(ids["cn:"+markupCN]), "cn:" + markupCN}, rows[1][:4])
	assert.Equal(t, fmt.Sprint(token), rows[1][5])
	b.waitFor("one kick counted", `document.getElementById("t-kicks").textContent === "1"`)

	// A page of another origin on this machine tries to kick cron, the
	// holder of jobs/nightly: a plain POST, a JSON POST and a form post.
	kickURL := fmt.Sprintf("http://%s/v1/sessions/%d/kick", p.admin, ids["cn:cron"])
	foreign := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, foreignPage, kickURL)
	}))
	defer foreign.Close()
	b.mu.Lock()
	b.ignore = append(b.ignore, foreign.URL)
	b.mu.Unlock()
	b.do(chromedp.Navigate(foreign.URL))
	b.waitFor("the foreign page's attempts", `document.title.startsWith("done")`)
	t.Logf("the foreign page: %s", eval[string](b, "document.title"))
	assert.True(t, silent(t, cron), "cron keeps jobs/nightly")
	assert.Equal(t, ids["cn:cron"], sessionsByIdentity(t, p.admin, "")["cn:cron"])
	for _, line := range p.Log() {
		assert.NotContains(t, line, fmt.Sprintf(`msg="admin kicked a session" session=%d `, ids["cn:cron"]))
	}

	b.noProblems()
	// The watch works: a dialog would have been seen.
	b.do(chromedp.Navigate("http://" + p.admin + "/"))
	b.do(chromedp.Evaluate[chromedp.Void](`setTimeout(() => alert("control"), 0)`))
	deadline := time.Now().Add(wait)
	for {
		b.mu.Lock()
		n := len(b.dialogs)
		b.mu.Unlock()
		if n == 1 {
			break
		}
		require.False(t, time.Now().After(deadline), "the control alert was not seen")
		time.Sleep(50 * time.Millisecond)
	}
}

// foreignPage is another site's page: it tries to kick a session through
// the visitor's browser in the three ways a page can send a POST.
const foreignPage = `<!doctype html><title>busy</title>
<iframe name="sink" id="sink"></iframe>
<form id="f" method="POST" enctype="text/plain" target="sink" action="%[1]s"><input name="a" value="b"></form>
<script>
const url = %[1]q;
(async () => {
  const out = [];
  try { const r = await fetch(url, {method: "POST", mode: "no-cors"}); out.push("no-cors:" + r.type); }
  catch (e) { out.push("no-cors:failed"); }
  try { const r = await fetch(url, {method: "POST", headers: {"Content-Type": "application/json"}, body: "{}"}); out.push("json:" + r.status); }
  catch (e) { out.push("json:failed"); }
  await new Promise((done) => {
    document.getElementById("sink").addEventListener("load", done, {once: true});
    document.getElementById("f").submit();
  });
  out.push("form:sent");
  document.title = "done " + out.join(" ");
})();
</script>`

// With a bearer token, the page first says it needs one; with the token
// pasted it shows the locks; a kick without the token fails and changes
// nothing; with it, the kick works. The token is never in the URL.
func testDashboardWithBearerToken(t *testing.T, b *browser) {
	const secret = "s3cret-dashboard-token"
	p := startServe(t, nil, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--admin-token-file", tokenFile(t, secret))
	holder := acquireAs(t, p.Addr, "deploy/api", "", nil, protocol.MsgAcquired)
	waiter := acquireAs(t, p.Addr, "deploy/api", "", nil, protocol.MsgWaiting)
	var holderID uint64
	for _, l := range listLocks(t, p.admin, secret) {
		holderID = l.Holder.ID
	}

	b.do(chromedp.Navigate("http://" + p.admin + "/"))
	b.waitFor("the request for a token", `document.getElementById("error").textContent.includes("bearer token")`)
	assert.Zero(t, eval[int](b, `document.querySelectorAll("#rows button").length`), "no data without the token")
	assert.False(t, eval[bool](b, `document.getElementById("auth").hidden`), "the token field is shown once the API asks for a token")

	paste := func() {
		b.do(chromedp.SendKeys(chromedp.ID("token"), secret), chromedp.Click(chromedp.ID("token-use")))
		b.waitFor("the locks", `document.querySelectorAll("#rows tr").length === 2 && document.getElementById("error").hidden`)
	}
	paste()
	assert.Empty(t, eval[string](b, `document.getElementById("token").value`), "the field is cleared")

	// Forget the token: the rows on screen stay, their kick fails.
	b.do(chromedp.Click(chromedp.ID("token-forget")))
	b.waitFor("the request for a token", `!document.getElementById("error").hidden`)
	b.kick(holderID)
	b.waitFor("the failed kick", `document.getElementById("notice").textContent.includes("failed: missing or wrong bearer token")`)
	assert.True(t, silent(t, holder), "the holder keeps its lock")

	paste()
	b.kick(holderID)
	b.waitFor("the kick's outcome", `document.getElementById("notice").textContent.startsWith("kicked session")`)
	typ, _, code, _, err := readFrame(t, holder, wait)
	require.NoError(t, err)
	assert.Equal(t, protocol.MsgError, typ)
	assert.Equal(t, protocol.ErrAdminClosed.Code, code)
	typ, _, _, _, err = readFrame(t, waiter, wait)
	require.NoError(t, err)
	assert.Equal(t, protocol.MsgAcquired, typ)
	b.waitFor("the waiter holding", `document.querySelectorAll("#rows tr").length === 1`)

	// Kept for this tab only: not in the URL, a cookie or localStorage.
	assert.NotContains(t, eval[string](b, "location.href"), secret)
	assert.Empty(t, eval[string](b, "document.cookie"))
	assert.Zero(t, eval[int](b, "localStorage.length"))
	assert.Equal(t, secret, eval[string](b, `sessionStorage.getItem("monolock.adminToken")`))
	b.noProblems()
}

// A semaphore with two of its three permits taken lists both holders, the
// permits in use, and a queue with an exclusive and a shared waiter, each
// with a kick button.
func testDashboardSharedLocks(t *testing.T, b *browser) {
	p := startServe(t, nil, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0")
	for range 2 {
		c := rawDial(t, p.Addr)
		c.acquireShared(t, "pool", 3)
		require.Equal(t, protocol.MsgAcquired, c.readType(t))
	}
	writer := rawDial(t, p.Addr)
	writer.acquire(t, "pool")
	require.Equal(t, protocol.MsgWaiting, writer.readType(t))
	reader := rawDial(t, p.Addr)
	reader.acquireShared(t, "pool", 3)
	require.Equal(t, protocol.MsgWaiting, reader.readType(t), "behind the writer")

	b.do(chromedp.Navigate("http://" + p.admin + "/"))
	b.waitFor("four sessions", `document.querySelectorAll("#rows tr").length === 4`)
	// A server without --admin-token-file: no token field to puzzle over,
	// and the totals say what they count.
	assert.True(t, eval[bool](b, `document.getElementById("auth").hidden`), "the token field on a server that needs no token")
	b.waitFor("the totals", `document.getElementById("t-sessions").textContent === "4"`)
	assert.Equal(t, "4 sessions|1 locks|1 locks held|2 sessions waiting", eval[string](b,
		`["t-sessions","t-locks","t-holders","t-waiters"].map(id => document.getElementById(id).textContent + " " + document.getElementById(id).nextElementSibling.textContent).join("|")`))
	var states []string
	for _, r := range b.rows() {
		states = append(states, r[0]+"|"+r[1])
	}
	assert.Equal(t, []string{"pool|held shared (2 of 3)", "|held shared", "|waiting #1", "|waiting #2 shared"}, states)
	assert.Equal(t, 4, eval[int](b, `document.querySelectorAll("#rows button.kick").length`))
	b.noProblems()
}
