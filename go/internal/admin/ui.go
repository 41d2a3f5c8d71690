package admin

import (
	"embed"
	"net/http"
	"path"
)

// The dashboard: one static page and its script and style, built into the
// binary so that it works on a machine without network.
//
//go:embed ui/index.html ui/dashboard.js ui/dashboard.css ui/favicon.svg
var uiFiles embed.FS

// DashboardCSP is the Content-Security-Policy of the dashboard's files:
// only this origin's script and style, no inline code, connections only
// to this origin, no framing, no forms, no base-URL changes. Lock names
// and identities are text any client chooses; the page never parses them
// as HTML, and the policy stops a script even if it did.
const DashboardCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
	"img-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

var uiTypes = map[string]string{
	"index.html":    "text/html; charset=utf-8",
	"dashboard.js":  "text/javascript; charset=utf-8",
	"dashboard.css": "text/css; charset=utf-8",
	"favicon.svg":   "image/svg+xml",
}

// serveUI answers GET / with the page and GET /ui/FILE with its files.
// They carry no data, so they need no token; the Host check still applies.
func serveUI(w http.ResponseWriter, r *http.Request) {
	name := "index.html"
	if r.URL.Path != "/" {
		name = path.Base(r.PathValue("file"))
	}
	typ, ok := uiTypes[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	body, err := uiFiles.ReadFile("ui/" + name)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", typ)
	h.Set("Content-Security-Policy", DashboardCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY") // frame-ancestors for browsers without CSP 2
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Cache-Control", "no-cache") // a new binary's page at once after an upgrade
	_, _ = w.Write(body)
}
