// Package peeroverlap is the etcd peer's tool for package overlap's
// work-overlap measurement: etcdctl lock, whose queue it watches through
// etcd's client.
package peeroverlap

import (
	"context"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/monolock/monolock/bench/internal/overlap"
	"github.com/monolock/monolock/bench/internal/peers"
	"github.com/monolock/monolock/bench/internal/systems"
)

// EtcdctlLock is `etcdctl --endpoints ADDR lock --ttl TTL NAME -- CMD`
// against the benchmark's etcd peer, with the session TTL the lease in
// whole seconds. It returns the client it watches the queue with; the
// caller closes it.
func EtcdctlLock(etcdctl string, lease time.Duration) (overlap.Tool, *clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{systems.EtcdAddr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return overlap.Tool{}, nil, err
	}
	ttl := strconv.Itoa(peers.EtcdTTL(lease))
	return overlap.Tool{
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
