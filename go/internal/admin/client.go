package admin

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
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

// Locks fetches the lock listing.
func (c *Client) Locks(ctx context.Context) ([]Lock, error) {
	var resp LocksResponse
	if err := c.do(ctx, http.MethodGet, "/v1/locks", &resp); err != nil {
		return nil, err
	}
	return resp.Locks, nil
}

// Kick ends a session. A session that does not exist is an error.
func (c *Client) Kick(ctx context.Context, session uint64) error {
	var resp KickResponse
	return c.do(ctx, http.MethodPost, fmt.Sprintf("/v1/sessions/%d/kick", session), &resp)
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
		var e ErrorResponse
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return fmt.Errorf("admin API: %s (%s)", e.Error, resp.Status)
		}
		return fmt.Errorf("admin API: %s", resp.Status)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("admin API: bad answer: %w", err)
	}
	return nil
}
