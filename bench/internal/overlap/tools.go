package overlap

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// MonolockRun is `monolock run --server ADDR --lease LEASE NAME -- CMD`
// with the binary bin against the server at server, whose admin API at
// admin tells when B waits.
func MonolockRun(bin, server, admin string, lease time.Duration) Tool {
	hc := &http.Client{Timeout: 2 * time.Second}
	return Tool{
		Name:     "monolock run",
		Upstream: server,
		Direct:   server,
		Wire:     true,
		Argv: func(addr, name string, cmd []string) []string {
			return append([]string{bin, "run", "--server", addr, "--lease", fmt.Sprintf("%dms", lease.Milliseconds()), name, "--"}, cmd...)
		},
		Queued: func(ctx context.Context, name string) (bool, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/v1/locks", nil)
			if err != nil {
				return false, err
			}
			resp, err := hc.Do(req)
			if err != nil {
				return false, err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return false, fmt.Errorf("GET /v1/locks: %s", resp.Status)
			}
			// The admin API's shape (go/internal/admin.LocksResponse).
			var body struct {
				Locks []struct {
					Name    string            `json:"name"`
					Waiters []json.RawMessage `json:"waiters"`
				} `json:"locks"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				return false, err
			}
			for _, l := range body.Locks {
				if l.Name == name {
					return len(l.Waiters) > 0, nil
				}
			}
			return false, nil
		},
	}
}
