package peers

import (
	"context"
	"math"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/monolock/monolock/bench/internal/systems"
)

// etcdSystem is etcd's own recipe: one concurrency.Session (a lease kept
// alive by the client) per worker, a concurrency.Mutex per acquisition.
// Waiters watch their predecessor's key, so a release wakes exactly one.
type etcdSystem struct {
	cli *clientv3.Client
	o   systems.Options
}

// OpenEtcd connects a client to addr.
func OpenEtcd(ctx context.Context, addr string, o systems.Options) (systems.System, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{addr},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := cli.Status(sctx, addr); err != nil {
		cli.Close()
		return nil, err
	}
	return &etcdSystem{cli: cli, o: o}, nil
}

// EtcdClient exposes the client to the idle-holder workload.
func EtcdClient(s systems.System) *clientv3.Client { return s.(*etcdSystem).cli }

// EtcdTTL is the lease TTL in whole seconds (etcd's unit), at least 1.
func EtcdTTL(lease time.Duration) int {
	return max(1, int(math.Ceil(lease.Seconds())))
}

func (e *etcdSystem) Name() string { return systems.Etcd }
func (e *etcdSystem) Close() error { return e.cli.Close() }

func (e *etcdSystem) Worker(ctx context.Context) (systems.Worker, error) {
	s, err := concurrency.NewSession(e.cli, concurrency.WithTTL(EtcdTTL(e.o.Lease)), concurrency.WithContext(ctx))
	if err != nil {
		return nil, err
	}
	return etcdWorker{s}, nil
}

type etcdWorker struct{ s *concurrency.Session }

func (w etcdWorker) Acquire(ctx context.Context, name string) (systems.Held, error) {
	m := concurrency.NewMutex(w.s, "/lock/"+name)
	if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	return etcdHeld{m}, nil
}

func (w etcdWorker) Close() error { return w.s.Close() }

type etcdHeld struct{ m *concurrency.Mutex }

func (h etcdHeld) Release() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return h.m.Unlock(ctx)
}
