package runner

// TLS settings of acquire commands and the kick step: what the runner adds
// to a scenario on a server with TLS or through its admin API.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/monolock/monolock/conformance/scenario"
	"github.com/monolock/monolock/go/testkit/pipe"
)

// tlsOf is the tls object of an acquire command: the run's CA, and the
// client certificate and server name the step asks for.
func (r *run) tlsOf(st *scenario.StepTLS) *pipe.TLS {
	certs := r.srv.certs
	t := &pipe.TLS{CAFile: certs.CA}
	if st == nil {
		return t
	}
	if st.Cert != "" {
		t.CertFile = certs.ClientCert[st.Cert]
		t.KeyFile = certs.ClientKey[st.Cert]
	}
	t.ServerName = st.ServerName
	return t
}

// locksResponse is the part of GET /v1/locks the kick step reads.
type locksResponse struct {
	Locks []struct {
		Name   string `json:"name"`
		Holder *struct {
			Session uint64 `json:"session"`
		} `json:"holder"`
	} `json:"locks"`
}

// kick ends the session holding lock name through the admin API: GET
// /v1/locks finds the holder, POST /v1/sessions/{id}/kick ends it. It
// marks as the moment before the POST.
func (r *run) kick(ctx context.Context, name, as string) error {
	base := "http://" + r.srv.adminAddr
	body, err := adminCall(ctx, http.MethodGet, base+"/v1/locks")
	if err != nil {
		return err
	}
	var locks locksResponse
	if err := json.Unmarshal(body, &locks); err != nil {
		return fmt.Errorf("admin API: GET /v1/locks: %v", err)
	}
	var session uint64
	found := false
	for _, l := range locks.Locks {
		if l.Name == name && l.Holder != nil {
			session, found = l.Holder.Session, true
		}
	}
	if !found {
		return failf("lock %q has no holder to kick: %s", name, bytes.TrimSpace(body))
	}
	r.mark(as, r.now())
	_, err = adminCall(ctx, http.MethodPost, fmt.Sprintf("%s/v1/sessions/%d/kick", base, session))
	return err
}

// adminCall makes one admin API request and returns the body of a 200.
func adminCall(ctx context.Context, method, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("admin API: %s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("admin API: %s %s: %v", method, url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("admin API: %s %s: %s: %s", method, url, resp.Status, bytes.TrimSpace(body))
	}
	return body, nil
}
