package overlap

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/monolock/monolock/bench/internal/systems"
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

// EtcdctlLock is `etcdctl --endpoints ADDR lock --ttl TTL NAME -- CMD`
// against the benchmark's etcd peer, with the session TTL the lease in
// whole seconds. It returns the client it watches the queue with; the
// caller closes it.
func EtcdctlLock(etcdctl string, lease time.Duration) (Tool, *clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{systems.EtcdAddr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return Tool{}, nil, err
	}
	ttl := strconv.Itoa(systems.EtcdTTL(lease))
	return Tool{
		Name:     "etcdctl lock",
		Upstream: systems.EtcdAddr,
		Direct:   systems.EtcdAddr,
		Env:      []string{"ETCDCTL_API=3"},
		Argv: func(addr, name string, cmd []string) []string {
			return append([]string{etcdctl, "--endpoints", addr, "lock", "--ttl", ttl, name, "--"}, cmd...)
		},
		// etcdctl's mutex puts one key per claimant under NAME/: queued
		// once B's is there beside A's.
		Queued: func(ctx context.Context, name string) (bool, error) {
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			r, err := cli.Get(ctx, name+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				return false, err
			}
			return r.Count >= 2, nil
		},
	}, cli, nil
}
