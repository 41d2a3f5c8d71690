package admin

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// Client calls the admin API; monolock locks and monolock kick use it.
type Client struct {
	base  string // scheme://host:port
	token string
	http  *http.Client
}

// NewClient returns a client for the admin API at addr: "host:port" (plain
// HTTP, or HTTPS when tlsCfg is set) or a full http:// or https:// URL.
func NewClient(addr, token string, tlsCfg *tls.Config, timeout time.Duration) *Client {
	base := strings.TrimRight(addr, "/")
	if !strings.Contains(base, "://") {
		scheme := "http://"
		if tlsCfg != nil {
			scheme = "https://"
		}
		base = scheme + base
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tlsCfg
	tr.Proxy = nil // the admin API is local or in the operator's network, never behind a proxy
	return &Client{base: base, token: token, http: &http.Client{Transport: tr, Timeout: timeout}}
}

// Locks fetches every lock, page by page.
func (c *Client) Locks(ctx context.Context) ([]Lock, error) {
	locks, _, err := c.LockPages(ctx, 0)
	return locks, err
}

// LockPages fetches every lock, following "next" from page to page, and
// returns them with the number of pages it took. limit is the page size
// to ask for (0: the server's default). A server older than paging
// answers everything in one page, which ends the walk too.
func (c *Client) LockPages(ctx context.Context, limit int) (locks []Lock, pages int, err error) {
	after := ""
	for {
		q := url.Values{}
		if limit > 0 {
			q.Set("limit", strconv.Itoa(limit))
		}
		if after != "" {
			q.Set("after", after)
		}
		path := "/v1/locks"
		if len(q) > 0 {
			path += "?" + q.Encode()
		}
		var resp LocksResponse
		if err := c.do(ctx, http.MethodGet, path, &resp); err != nil {
			return nil, pages, err
		}
		pages++
		locks = append(locks, resp.Locks...)
		if resp.Next == "" {
			return locks, pages, nil
		}
		// Names only grow from page to page; a server that repeats
		// itself would otherwise keep this loop going until the timeout.
		if resp.Next <= after {
			return nil, pages, fmt.Errorf("admin API: page %d ends at %q, not after %q: the listing does not advance", pages, resp.Next, after)
		}
		after = resp.Next
	}
}

// FindLock fetches the lock named name, with one request of one lock:
// after=justBelow(name) starts the page at name itself. found is false when
// the server has no such lock (nobody holds it or waits for it). A server
// older than paging ignores after and limit and answers every lock, which
// the search below covers too.
func (c *Client) FindLock(ctx context.Context, name string) (lock Lock, found bool, err error) {
	q := url.Values{"limit": {"1"}}
	if after := justBelow(name); after != "" {
		q.Set("after", after)
	}
	var resp LocksResponse
	if err := c.do(ctx, http.MethodGet, "/v1/locks?"+q.Encode(), &resp); err != nil {
		return Lock{}, false, err
	}
	for _, l := range resp.Locks {
		if l.Name == name {
			return l, true, nil
		}
	}
	return Lock{}, false, nil
}

// justBelow is the greatest string of at most protocol.MaxNameLen bytes
// that sorts before name (byte order, as the listing's): name without its
// last byte if that is 0x00, else with that byte one lower and then 0xff
// up to the limit. No lock name lies strictly between it and name.
func justBelow(name string) string {
	if name == "" {
		return ""
	}
	last := name[len(name)-1]
	if last == 0 {
		return name[:len(name)-1]
	}
	b := []byte(name[:len(name)-1])
	b = append(b, last-1)
	for len(b) < protocol.MaxNameLen {
		b = append(b, 0xff)
	}
	return string(b)
}

// ErrStandalone is Cell's error for a server that is not part of an HA cell.
var ErrStandalone = errors.New("standalone server: " + NotInCell)

// ErrNoCellAPI is Cell's error for an admin API without GET /v1/cell: a
// server older than the HA status.
var ErrNoCellAPI = errors.New("the admin API has no /v1/cell (a server older than the HA status)")

// Cell fetches the server's view of its HA cell. A server without HA gives
// ErrStandalone, one too old to say gives ErrNoCellAPI.
func (c *Client) Cell(ctx context.Context) (CellResponse, error) {
	var resp CellResponse
	err := c.do(ctx, http.MethodGet, "/v1/cell", &resp)
	var se *StatusError
	if errors.As(err, &se) && se.Code == http.StatusNotFound {
		// The plain-text form is what the first servers with /v1/cell sent.
		if se.Message == NotInCell || strings.TrimSpace(se.body) == NotInCell {
			return CellResponse{}, ErrStandalone
		}
		return CellResponse{}, ErrNoCellAPI
	}
	return resp, err
}

// StatusError is an answer from the admin API other than 200 OK.
type StatusError struct {
	Code    int    // HTTP status code
	Status  string // status line, e.g. "404 Not Found"
	Message string // the body's "error", if it is an ErrorResponse
	body    string // the body, at most a few KiB of it
}

func (e *StatusError) Error() string {
	if e.Message != "" {
		return fmt.Sprintf("admin API: %s (%s)", e.Message, e.Status)
	}
	return "admin API: " + e.Status
}

// Kick ends a session. A session that does not exist is an error, and so
// is a held-back holder (StatusError 409) unless force.
func (c *Client) Kick(ctx context.Context, session uint64, force bool) (KickResponse, error) {
	var resp KickResponse
	path := fmt.Sprintf("/v1/sessions/%d/kick", session)
	if force {
		path += "?force=true"
	}
	err := c.do(ctx, http.MethodPost, path, &resp)
	return resp, err
}

func (c *Client) do(ctx context.Context, method, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, nil)
	if err != nil {
		return err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("admin API: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("admin API: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		se := &StatusError{Code: resp.StatusCode, Status: resp.Status, body: string(body[:min(len(body), 4<<10)])}
		var e ErrorResponse
		if json.Unmarshal(body, &e) == nil {
			se.Message = e.Error
		}
		return se
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("admin API: bad answer: %w", err)
	}
	return nil
}
