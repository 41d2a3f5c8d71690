package admin_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/admin"
)

// The dashboard's page and files need no token (they carry no data) and
// come with a strict CSP; the Host check still applies; nothing else is
// served from the embedded files.
func TestDashboardFilesAreStaticAndStrict(t *testing.T) {
	s := start(t, "sekrit")
	h := admin.Handler(admin.Config{Server: s.srv.Server, Token: "sekrit"})
	for path, typ := range map[string]string{
		"/":                 "text/html; charset=utf-8",
		"/ui/dashboard.js":  "text/javascript; charset=utf-8",
		"/ui/dashboard.css": "text/css; charset=utf-8",
		"/ui/favicon.svg":   "image/svg+xml",
	} {
		req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:7118"+path, nil)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, http.StatusOK, rec.Code, path)
		hd := rec.Header()
		assert.Equal(t, typ, hd.Get("Content-Type"), path)
		assert.Equal(t, admin.DashboardCSP, hd.Get("Content-Security-Policy"), path)
		assert.Equal(t, "nosniff", hd.Get("X-Content-Type-Options"), path)
		assert.Equal(t, "no-referrer", hd.Get("Referrer-Policy"), path)
		assert.NotEmpty(t, rec.Body.String(), path)
	}
	for _, d := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'",
		"frame-ancestors 'none'", "base-uri 'none'", "form-action 'none'"} {
		assert.Contains(t, admin.DashboardCSP, d)
	}
	assert.NotContains(t, admin.DashboardCSP, "unsafe")

	for _, path := range []string{"/ui/", "/ui/index.htm", "/ui/../admin.go", "/ui/ui.go", "/index.html", "/v1/locks"} {
		code, _ := do(t, h, http.MethodGet, path, "127.0.0.1:7118")
		assert.Contains(t, []int{http.StatusNotFound, http.StatusUnauthorized, http.StatusMovedPermanently, http.StatusTemporaryRedirect}, code, path)
	}
	code, _ := do(t, h, http.MethodGet, "/", "evil.example")
	assert.Equal(t, http.StatusMisdirectedRequest, code, "DNS rebinding gets no page either")
	code, _ = do(t, h, http.MethodPost, "/", "127.0.0.1:7118")
	assert.Equal(t, http.StatusMethodNotAllowed, code)

	// The page holds no inline script or style: the CSP would block it.
	body := get(t, h, "/")
	assert.NotContains(t, body, "<script>")
	assert.NotContains(t, body, "style=")
	assert.NotContains(t, body, "<style")
	assert.NotContains(t, body, "http://")
	assert.NotContains(t, body, "https://")
	js := get(t, h, "/ui/dashboard.js")
	assert.NotContains(t, js, "innerHTML")
	assert.NotContains(t, js, "insertAdjacentHTML")
	assert.NotContains(t, js, "document.write")
}

func get(t *testing.T, h http.Handler, path string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1:7118"+path, nil))
	require.Equal(t, http.StatusOK, rec.Code, path)
	return rec.Body.String()
}

// GET /v1/stats answers the totals with the server's time, behind the
// token like every /v1/ endpoint; without a Stats source it is a 404.
func TestStatsEndpoint(t *testing.T) {
	want := admin.Stats{Sessions: 3, Locks: 2, Holders: 1, Waiters: 1, Grants: 42, Expiries: 5, Kicks: 1}
	s := start(t, "")
	h := admin.Handler(admin.Config{Server: s.srv.Server, Token: "sekrit", Stats: func() admin.Stats { return want }})
	code, _ := do(t, h, http.MethodGet, "/v1/stats", "127.0.0.1")
	assert.Equal(t, http.StatusUnauthorized, code)
	before := time.Now().UTC()
	code, body := do(t, h, http.MethodGet, "/v1/stats", "127.0.0.1", "Authorization", "Bearer sekrit")
	require.Equal(t, http.StatusOK, code, body)
	var got admin.StatsResponse
	require.NoError(t, json.Unmarshal([]byte(body), &got))
	assert.Equal(t, want, got.Stats)
	assert.False(t, got.Now.Before(before.Add(-time.Second)))
	for _, k := range []string{`"now"`, `"sessions"`, `"locks"`, `"holders"`, `"waiters"`, `"grants_total"`, `"expiries_total"`, `"kicks_total"`} {
		assert.Contains(t, body, k)
	}

	h = admin.Handler(admin.Config{Server: s.srv.Server})
	code, body = do(t, h, http.MethodGet, "/v1/stats", "127.0.0.1")
	assert.Equal(t, http.StatusNotFound, code)
	assert.Contains(t, body, "no statistics")
}

// JSON answers are not to be sniffed into scripts or embedded elsewhere.
func TestJSONAnswersAreNotSniffed(t *testing.T) {
	s := start(t, "")
	resp, err := http.Get(s.admin.URL + "/v1/locks")
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	assert.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
	assert.Equal(t, "same-origin", resp.Header.Get("Cross-Origin-Resource-Policy"))
	assert.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json"))
}

// A POST is the API's own origin's only: Origin's host and port must be
// Host's, a missing port being the scheme's default.
func TestKickOnlyFromTheAPIsOwnOrigin(t *testing.T) {
	s := start(t, "")
	h := admin.Handler(admin.Config{Server: s.srv.Server})
	for _, c := range []struct {
		host, origin string
		want         int
	}{
		{"127.0.0.1:7118", "", http.StatusNotFound}, // the commands: no Origin
		{"127.0.0.1:7118", "http://127.0.0.1:7118", http.StatusNotFound},
		{"[::1]:7118", "http://[::1]:7118", http.StatusNotFound},
		{"[::1]:7118", "http://[0:0:0:0:0:0:0:1]:7118", http.StatusNotFound},
		{"LOCALHOST:7118", "http://localhost:7118", http.StatusNotFound},
		{"localhost", "http://localhost", http.StatusNotFound},
		{"localhost", "http://localhost:80", http.StatusNotFound},
		{"127.0.0.1:7118", "http://127.0.0.1:7119", http.StatusForbidden},
		{"127.0.0.1:7118", "http://127.0.0.2:7118", http.StatusForbidden},
		{"127.0.0.1:7118", "http://localhost:7118", http.StatusForbidden},
		{"127.0.0.1:7118", "null", http.StatusForbidden},
		{"127.0.0.1:7118", "http://user@127.0.0.1:7118", http.StatusForbidden},
		{"127.0.0.1:7118", "file://", http.StatusForbidden},
		{"localhost", "http://localhost:8080", http.StatusForbidden},
	} {
		var hdr []string
		if c.origin != "" {
			hdr = []string{"Origin", c.origin}
		}
		code, body := do(t, h, http.MethodPost, "/v1/sessions/99/kick", c.host, hdr...)
		assert.Equal(t, c.want, code, "Host %s, Origin %s: %s", c.host, c.origin, body)
	}
}
