// Package admin is the lock server's HTTP admin API, served on a listener of
// its own:
//
//	GET  /v1/locks?limit=N&after=X  a page of locks, by name: holder and waiters in queue order (JSON)
//	GET  /v1/cell                   HA: this server's role, the active server, the grace left (JSON; 404 NotInCell without HA)
//	GET  /v1/stats                  totals for the dashboard: sessions, locks, grants, expiries, kicks (JSON)
//	POST /v1/sessions/{id}/kick     end a session with ERROR 0x02; its lock goes to the next waiter
//	GET  /metrics                   Prometheus metrics
//	GET  /healthz                   200 while the process runs
//	GET  /readyz                    200 while the server accepts sessions, else 503
//	GET  /                          the dashboard: a static page whose script reads the JSON endpoints
//
// A listing is paged so that no request builds the whole lock table in
// memory, and at most MaxListings are built at once.
//
// With a bearer token configured, /v1/ and /metrics require the header
// "Authorization: Bearer TOKEN"; the health checks never do.
//
// A web page must not drive the API through the browser of someone who can
// reach it: everything but the health checks answers only requests whose
// Host is loopback, the API's own listen host, or one the operator allowed
// (DNS rebinding carries the attacker's name), and a POST is refused unless
// its Origin (when it has one) is the API's own origin, and unless it has no
// body type or JSON's (an HTML form cannot send that to another site).
//
// The dashboard page and its files carry no data and need no token; the
// data comes from the JSON endpoints, which keep every guard.
package admin

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/monolock/monolock/go/internal/listing"
	"github.com/monolock/monolock/go/internal/locktable"
	"github.com/monolock/monolock/go/internal/server"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// Server is what the admin API reads and acts on; *server.Server has it.
type Server interface {
	// LockPage is up to limit locks named after after, in name order,
	// and whether more follow.
	LockPage(after string, limit int) (page []listing.Lock, more bool)
	Kick(sessionID uint64) bool
	// HeldBackUntil tells whether sessionID is a held-back holder (its
	// session is gone, its claim keeps its place) and until when.
	HeldBackUntil(sessionID uint64) (time.Time, bool)
	KickHeldBack(sessionID uint64) bool
	// SessionPage is up to limit sessions of one kind (listing.Kind...)
	// of lock name after key after, and whether name has any session.
	SessionPage(name, kind string, after uint64, limit int) (page listing.SessionPage, found bool)
	Ready() bool
}

// Config configures the handler.
type Config struct {
	Server  Server
	Metrics http.Handler // nil: /metrics answers 404
	Token   string       // "": no authentication
	Logger  *slog.Logger // nil: discard
	Stats   func() Stats // nil: /v1/stats answers 404

	// Addr is the address the API listens on. A non-loopback host there is
	// an allowed Host too; an unspecified one (0.0.0.0, ::) allows every IP
	// address as Host: DNS rebinding always carries a name.
	Addr string
	// AllowedHosts are further Host names or IP addresses (no port) the
	// API answers to, besides loopback ones (--admin-allowed-hosts).
	AllowedHosts []string
}

// Session and Lock are the listing's types (package listing): the server
// builds them, this API writes them, and its client reads them.
type (
	Session = listing.Session
	Lock    = listing.Lock
)

// Modes of a claim and of a held lock, as listings name them.
const (
	ModeExclusive = listing.ModeExclusive
	ModeShared    = listing.ModeShared
)

// LocksResponse is the body of GET /v1/locks: one page.
type LocksResponse struct {
	Locks []Lock `json:"locks"`
	// Next is set when more locks follow: the name of the last lock of
	// this page, to pass as after for the next one. Absent on the last page.
	Next string `json:"next,omitempty"`
}

// Listing limits. A page ends at ?limit= locks or once its JSON passes
// MaxPageBytes (one lock more at most, and at least one lock), whichever
// comes first; a lock names at most MaxListedSessions holders, held-back
// holders and waiters each, so that one lock's JSON is bounded too (about
// 200 KB at the most, with 255-byte names and long identities). So a page
// is at most MaxPageBytes plus one lock, and MaxListings of them at once
// bound what listings hold in memory, however many clients ask and however
// slowly they read.
const (
	DefaultPageLimit  = 500     // locks per page without ?limit=
	MaxPageLimit      = 2000    // the largest ?limit= accepted
	MaxPageBytes      = 1 << 20 // a page ends once its JSON passes this
	MaxListedSessions = locktable.MaxListed
	MaxListings       = 4 // listings built or written at once; more get 503
)

// Stats are the server's totals, as /metrics has them.
type Stats struct {
	Sessions int `json:"sessions"`  // open sessions, holders, waiters and those not past their ACQUIRE
	HeldBack int `json:"held_back"` // holders whose sessions are gone, kept for their hold (see Lock.HeldBackHolders)
	Locks    int `json:"locks"`     // lock names with a holder or waiters
	Holders  int `json:"holders"`
	Waiters  int `json:"waiters"`
	// Counters since the server started: a rate is the difference of two
	// samples over the difference of their Now.
	Grants   uint64 `json:"grants_total"`
	Expiries uint64 `json:"expiries_total"`
	Kicks    uint64 `json:"kicks_total"`
}

// StatsResponse is the body of GET /v1/stats.
type StatsResponse struct {
	Now time.Time `json:"now"` // the server's clock when it read the totals
	Stats
}

// KickResponse is the body of a successful kick.
type KickResponse struct {
	Kicked uint64 `json:"kicked"`
	// HeldBack: the kicked session was a held-back holder (force).
	HeldBack bool `json:"held_back,omitempty"`
}

// CellResponse is the body of GET /v1/cell on a server of an HA cell.
type CellResponse struct {
	Role   string `json:"role"`   // "leader" (the active server) or "follower" (a passive one)
	Leader string `json:"leader"` // the active server's advertised address, "" while none is known
	// GraceRemainingMS is how long the active server still waits, after
	// taking over, before it grants (claims get WAITING meanwhile); 0 on a
	// passive server and once the grace is over.
	GraceRemainingMS int64 `json:"grace_remaining_ms"`
}

// NotInCell is the error of GET /v1/cell (404) on a server without HA.
// An admin API older than /v1/cell answers 404 "no such endpoint" instead.
const NotInCell = "not part of an HA cell"

// ErrorResponse is the body of every non-2xx answer from /v1/.
type ErrorResponse struct {
	Error string `json:"error"`
}

// Handler returns the admin API.
func Handler(cfg Config) http.Handler {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &api{srv: cfg.Server, log: log, stats: cfg.Stats, listings: make(chan struct{}, MaxListings)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", a.readyz)
	mux.HandleFunc("GET /{$}", serveUI)
	mux.HandleFunc("GET /ui/{file}", serveUI)
	protected := http.NewServeMux()
	protected.HandleFunc("GET /v1/locks", a.locks)
	protected.HandleFunc("GET /v1/lock/sessions", a.lockSessions)
	protected.HandleFunc("GET /v1/cell", a.cell)
	protected.HandleFunc("GET /v1/stats", a.statsHandler)
	protected.HandleFunc("POST /v1/sessions/{id}/kick", a.kick)
	protected.HandleFunc("/v1/", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusNotFound, ErrorResponse{"no such endpoint"})
	})
	if cfg.Metrics != nil {
		protected.Handle("GET /metrics", cfg.Metrics)
	}
	guarded := requireToken(cfg.Token, protected)
	mux.Handle("/v1/", guarded)
	mux.Handle("/metrics", guarded)
	return inRequest(sameSite(newHostPolicy(cfg.Addr, cfg.AllowedHosts), mux))
}

// hostPolicy says which Host header values the API answers to.
type hostPolicy struct {
	names map[string]bool // lower case, IP addresses in canonical form
	anyIP bool            // listening on all interfaces: any IP literal
}

func newHostPolicy(addr string, allowed []string) hostPolicy {
	p := hostPolicy{names: map[string]bool{}}
	for _, h := range allowed {
		p.names[canonicalHost(h)] = true
	}
	if host, _, err := net.SplitHostPort(addr); err == nil {
		if ip, err := netip.ParseAddr(host); host == "" || err == nil && ip.IsUnspecified() {
			p.anyIP = true
		} else {
			p.names[canonicalHost(host)] = true
		}
	}
	return p
}

// canonicalHost is host (no port, brackets allowed) in lower case, an IP
// address in its canonical form.
func canonicalHost(host string) string {
	host = strings.ToLower(strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), "."))
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap().String()
	}
	return host
}

// allowed reports whether host (without port) is loopback or allowed by
// name. This is also what an Origin must be.
func (p hostPolicy) allowed(host string) bool {
	host = canonicalHost(host)
	if host == "localhost" || p.names[host] {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// allowedHost reports whether a Host header (with or without port) is one
// the API answers to.
func (p hostPolicy) allowedHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	if host == "" {
		return false
	}
	if p.allowed(host) {
		return true
	}
	_, err := netip.ParseAddr(canonicalHost(host))
	return p.anyIP && err == nil
}

// sameSite refuses what a browser could send on behalf of another site:
// a foreign Host (421) on anything but the health checks, which say
// nothing and must answer probes by any name, and a state-changing request
// from another origin or with a body type other than JSON (403; see
// crossSite). The monolock commands send neither an Origin nor a body.
func sameSite(p hostPolicy, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		health := r.URL.Path == "/healthz" || r.URL.Path == "/readyz"
		if !health && !p.allowedHost(r.Host) {
			writeJSON(w, http.StatusMisdirectedRequest, ErrorResponse{fmt.Sprintf(
				"Host %q is not served here; allow it with --admin-allowed-hosts", r.Host)})
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if reason := crossSite(r); reason != "" {
				writeJSON(w, http.StatusForbidden, ErrorResponse{reason})
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// crossSite says why a state-changing request may come from another
// site's page, or "" when it cannot. Browsers send Origin with every POST
// (fetch and forms alike) and Sec-Fetch-Site with every request; the
// monolock commands send neither. The Host has passed hostPolicy, so an
// Origin equal to it is the API's own page (the dashboard); a page on
// another port of the same host is another origin, and refused.
func crossSite(r *http.Request) string {
	if o := r.Header.Get("Origin"); o != "" && !sameOrigin(o, r.Host) {
		return fmt.Sprintf("cross-origin request from %q refused: only the API's own origin may change things", o)
	}
	if sfs := r.Header.Get("Sec-Fetch-Site"); sfs != "" && sfs != "same-origin" && sfs != "none" {
		return fmt.Sprintf("cross-origin request (Sec-Fetch-Site: %s) refused", sfs)
	}
	// The form types (urlencoded, multipart, text/plain) are the ones a
	// page may send to another site without asking first; JSON is not.
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return fmt.Sprintf("content type %q refused: the API takes no form posts, only JSON or no body", ct)
		}
	}
	return ""
}

// sameOrigin reports whether origin ("scheme://host[:port]") names the
// same host and port as the request's Host header. A missing port is the
// scheme's default on both sides: a browser leaves it out of Host exactly
// then. The scheme is not compared, so that a TLS-terminating proxy that
// passes Host on (its Origin is https, the API's request http) still works.
func sameOrigin(origin, reqHost string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || u.User != nil || u.Path != "" || u.RawQuery != "" {
		return false
	}
	def := map[string]string{"http": "80", "https": "443"}[u.Scheme]
	if def == "" {
		return false
	}
	norm := func(hostport string) string {
		host, port, err := net.SplitHostPort(hostport)
		if err != nil {
			host, port = hostport, def
		}
		return net.JoinHostPort(canonicalHost(host), port)
	}
	return norm(u.Host) == norm(reqHost)
}

// ParseAllowedHosts reads the --admin-allowed-hosts list: host names or IP
// addresses, separated by commas, without ports.
func ParseAllowedHosts(list string) ([]string, error) {
	var hosts []string
	for _, h := range strings.Split(list, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(h); err == nil || strings.ContainsAny(h, "/ \t@?#") {
			return nil, fmt.Errorf("%q: want a host name or IP address, without port or scheme", h)
		}
		hosts = append(hosts, h)
	}
	return hosts, nil
}

type api struct {
	srv      Server
	log      *slog.Logger
	stats    func() Stats
	listings chan struct{} // a semaphore: one token per listing in progress
}

func (a *api) readyz(w http.ResponseWriter, _ *http.Request) {
	if !a.srv.Ready() {
		http.Error(w, "not ready", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ready")
}

func (a *api) locks(w http.ResponseWriter, r *http.Request) {
	after, limit, err := pageParams(r.URL.RawQuery)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, ErrorResponse{err.Error()})
		return
	}
	if !a.takeListing(w) {
		return
	}
	defer func() { <-a.listings }()
	locks, more := a.srv.LockPage(after, limit)
	resp := LocksResponse{Locks: append([]Lock{}, locks...)}
	size := 0
	for i, l := range locks {
		if size > MaxPageBytes {
			// The rest of this page comes with the next.
			resp.Locks, more = locks[:i], true
			break
		}
		size += jsonSize(l)
	}
	if more && len(resp.Locks) > 0 {
		resp.Next = resp.Locks[len(resp.Locks)-1].Name
	}
	writeJSON(w, http.StatusOK, resp)
}

// lockSessions answers one page of one kind of a lock's sessions:
// GET /v1/lock/sessions?name=NAME&kind=holders|held_back_holders|waiters
// [&after=KEY][&limit=N]. A lock lists at most MaxListedSessions of each
// kind in /v1/locks; this walks the rest, bounded like a page of locks.
func (a *api) lockSessions(w http.ResponseWriter, r *http.Request) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err == nil {
		err = onlyOnce(q, "name", "kind", "after", "limit")
	}
	if err != nil {
		writeJSON(w, http.StatusBadRequest, ErrorResponse{err.Error()})
		return
	}
	bad := func(format string, args ...any) {
		writeJSON(w, http.StatusBadRequest, ErrorResponse{fmt.Sprintf(format, args...)})
	}
	name, kind := q.Get("name"), q.Get("kind")
	switch {
	case name == "" || len(name) > protocol.MaxNameLen:
		bad("name: want a lock name (1 to %d bytes)", protocol.MaxNameLen)
		return
	case kind != listing.KindHolders && kind != listing.KindHeldBackHolders && kind != listing.KindWaiters:
		bad("kind %q: want %s, %s or %s", kind, listing.KindHolders, listing.KindHeldBackHolders, listing.KindWaiters)
		return
	}
	var after uint64
	if v := q.Get("after"); v != "" {
		if after, err = strconv.ParseUint(v, 10, 64); err != nil {
			bad("after %q: want the \"next\" of the previous page", v)
			return
		}
	}
	limit := MaxListedSessions
	if v, ok := q["limit"]; ok {
		n, err := strconv.Atoi(v[0])
		if err != nil || n < 1 || n > MaxPageLimit {
			bad("limit %q: want a number of sessions from 1 to %d", v[0], MaxPageLimit)
			return
		}
		limit = n
	}
	if !a.takeListing(w) {
		return
	}
	defer func() { <-a.listings }()
	page, found := a.srv.SessionPage(name, kind, after, limit)
	if !found {
		writeJSON(w, http.StatusNotFound, ErrorResponse{fmt.Sprintf("nobody holds or waits for %q", name)})
		return
	}
	size := 0
	for i, s := range page.Sessions {
		if size > MaxPageBytes {
			page.Sessions = page.Sessions[:i]
			last := page.Sessions[i-1]
			page.Next = last.Token
			if kind == listing.KindWaiters {
				page.Next = last.Arrival
			}
			break
		}
		size += jsonSize(s)
	}
	writeJSON(w, http.StatusOK, page)
}

// onlyOnce refuses a query that gives one of keys more than once.
func onlyOnce(q url.Values, keys ...string) error {
	for _, k := range keys {
		if len(q[k]) > 1 {
			return fmt.Errorf("%s given %d times; give it once", k, len(q[k]))
		}
	}
	return nil
}

// takeListing takes a listing slot, or answers 503 and reports false. The
// slot is held until the page is written: a client that does not read
// keeps its page in memory until the write timeout.
func (a *api) takeListing(w http.ResponseWriter) bool {
	select {
	case a.listings <- struct{}{}:
		return true
	default:
		// At once, not queued; and the connection goes, so that a burst
		// of refused clients does not hold admin connections either.
		w.Header().Set("Retry-After", "1")
		w.Header().Set("Connection", "close")
		writeJSON(w, http.StatusServiceUnavailable, ErrorResponse{fmt.Sprintf(
			"%d lock listings are in progress, the most at once; retry shortly", MaxListings)})
		return false
	}
}

// pageParams reads ?limit=N&after=NAME of GET /v1/locks. Other parameters
// are ignored, as by every endpoint.
func pageParams(rawQuery string) (after string, limit int, err error) {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return "", 0, fmt.Errorf("bad query string: %v", err)
	}
	if err := onlyOnce(q, "limit", "after"); err != nil {
		return "", 0, err
	}
	limit = DefaultPageLimit
	if v, ok := q["limit"]; ok {
		n, err := strconv.Atoi(v[0])
		if err != nil || n < 1 || n > MaxPageLimit {
			return "", 0, fmt.Errorf("limit %q: want a number of locks from 1 to %d", v[0], MaxPageLimit)
		}
		limit = n
	}
	after = q.Get("after")
	if len(after) > protocol.MaxNameLen {
		return "", 0, fmt.Errorf("after: %d bytes; want a lock name (at most %d bytes), the \"next\" of the previous page", len(after), protocol.MaxNameLen)
	}
	return after, limit, nil
}

// cell describes the HA cell: this server's role, the active server and
// the grace a new leader still waits; 404 NotInCell without HA.
func (a *api) cell(w http.ResponseWriter, _ *http.Request) {
	c, ok := a.srv.(interface {
		Cell() (server.CellStatus, bool)
	})
	var st server.CellStatus
	if ok {
		st, ok = c.Cell()
	}
	if !ok {
		writeJSON(w, http.StatusNotFound, ErrorResponse{NotInCell})
		return
	}
	// Rounded up: 0 means the active server grants now.
	writeJSON(w, http.StatusOK, CellResponse{Role: st.Role, Leader: st.Leader,
		GraceRemainingMS: (st.Grace + time.Millisecond - 1).Milliseconds()})
}

// statsHandler answers the totals the dashboard shows, so that it need not
// parse the Prometheus text format.
func (a *api) statsHandler(w http.ResponseWriter, _ *http.Request) {
	if a.stats == nil {
		writeJSON(w, http.StatusNotFound, ErrorResponse{"no statistics on this server"})
		return
	}
	writeJSON(w, http.StatusOK, StatsResponse{Now: time.Now().UTC(), Stats: a.stats()})
}

func (a *api) kick(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, ErrorResponse{fmt.Sprintf("session id %q is not a number", r.PathValue("id"))})
		return
	}
	if a.srv.Kick(id) {
		a.log.Info("admin kicked a session", "session", id, "by", r.RemoteAddr)
		writeJSON(w, http.StatusOK, KickResponse{Kicked: id})
		return
	}
	until, heldBack := a.srv.HeldBackUntil(id)
	switch {
	case !heldBack:
		writeJSON(w, http.StatusNotFound, ErrorResponse{fmt.Sprintf("no session %d", id)})
	case r.URL.Query().Get("force") != "true":
		writeJSON(w, http.StatusConflict, ErrorResponse{fmt.Sprintf(
			"session %d is a held-back holder: its connection is gone (reset, or silent under the lock delay) and its lock is kept until %s, "+
				"since it may still be working; nobody can tell it of a kick, so after one only the fencing token protects the resource: "+
				"kick it with force (monolock kick --force) to hand the lock on now", id, until.UTC().Format(time.RFC3339))})
	case !a.srv.KickHeldBack(id):
		writeJSON(w, http.StatusNotFound, ErrorResponse{fmt.Sprintf("no session %d", id)})
	default:
		a.log.Warn("admin kicked a held-back holder", "session", id, "by", r.RemoteAddr)
		writeJSON(w, http.StatusOK, KickResponse{Kicked: id, HeldBack: true})
	}
}

// jsonSize is how many bytes v takes in a page as writeJSON writes it:
// indented, one lock two levels deep.
func jsonSize(v any) int {
	b, _ := json.MarshalIndent(v, "    ", "  ")
	return len(b)
}

// requireToken lets a request through only with the right bearer token.
// The scheme is case-insensitive (RFC 7235: "bearer" is "Bearer"); the
// token is compared in constant time.
func requireToken(token string, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, got, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="monolock"`)
			writeJSON(w, http.StatusUnauthorized, ErrorResponse{"missing or wrong bearer token"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	// Not to be run as a script or embedded by another site's page.
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cross-Origin-Resource-Policy", "same-origin")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// IsLoopback reports whether a listen address ("host:port") only accepts
// connections from this machine: a loopback IP or "localhost". An empty
// host (all interfaces) is not loopback.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// DefaultAddr is where the admin API listens unless told otherwise.
const DefaultAddr = "127.0.0.1:7118"

// Off is the --admin value that turns the admin API off.
const Off = "off"
