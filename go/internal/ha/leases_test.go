package ha

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/monolock/monolock/go/internal/leaserecord"
	"github.com/monolock/monolock/go/internal/testetcd"
)

// leading returns a node of a fresh cell on a real etcd and the guard of
// an election it won (the node itself does not run).
func leading(t *testing.T, endpoint string) (*Node, clientv3.Cmp) {
	t.Helper()
	n, err := New(Config{Endpoints: []string{endpoint}, Prefix: "/t/", Advertise: "a", TTL: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { n.cli.Close() })
	sess, err := concurrency.NewSession(n.cli, concurrency.WithTTL(5))
	require.NoError(t, err)
	t.Cleanup(func() { sess.Close() })
	e := concurrency.NewElection(sess, n.key("election"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, e.Campaign(ctx, "a"))
	return n, clientv3.Compare(clientv3.CreateRevision(e.Key()), "=", e.Rev())
}

func openCellRecord(t *testing.T, n *Node, guard clientv3.Cmp) *leaserecord.Record {
	t.Helper()
	r, err := leaserecord.OpenStore(&leaseStore{n: n, guard: guard}, leaserecord.Options{LazyWrite: 20 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(r.Close)
	return r
}

func get(t *testing.T, n *Node, key string, opts ...clientv3.OpOption) *clientv3.GetResponse {
	t.Helper()
	resp, err := n.cli.Get(context.Background(), n.key(key), opts...)
	require.NoError(t, err)
	return resp
}

// The cell's record round-trips through etcd: the bound for every lock, and
// more long-lease names than one transaction may carry; a name whose
// sessions ended leaves etcd, and max-lease-ms follows the longest wait
// for servers of earlier versions.
func TestCellLeaseRecordInEtcd(t *testing.T) {
	endpoint := testetcd.Start(t)
	n, guard := leading(t, endpoint)
	r := openCellRecord(t, n, guard)
	require.NoError(t, r.Admit("short", 3*time.Second))
	names := make([]string, 150)
	for i := range names {
		names[i] = fmt.Sprintf("jobs/%03d", i)
		require.NoError(t, r.Admit(names[i], time.Minute))
	}
	assert.Equal(t, int64(150), get(t, n, leasesLock, clientv3.WithPrefix(), clientv3.WithCountOnly()).Count)
	assert.Equal(t, "3072", string(get(t, n, leasesAll).Kvs[0].Value), "3 s on the record's grid")
	assert.Equal(t, "61440", string(get(t, n, legacyMaxMS).Kvs[0].Value))

	for _, name := range names[1:] {
		r.Done(name, time.Minute)
	}
	require.Eventually(t, func() bool {
		return get(t, n, leasesLock, clientv3.WithPrefix(), clientv3.WithCountOnly()).Count == 1
	}, 5*time.Second, 20*time.Millisecond, "the ended sessions' names leave etcd")
	r.Close() // as a leader that lost its leadership: nothing more is written

	// The next leader (here: the same guard) waits out what is stated.
	next := openCellRecord(t, n, guard)
	all, locks := next.Inherited()
	assert.InDelta(t, 3072*time.Millisecond, time.Until(all), float64(time.Second))
	require.Len(t, locks, 1)
	assert.InDelta(t, time.Minute, time.Until(locks[names[0]]), float64(2*time.Second))
}

// After a leader of an earlier version (it writes token-hwm without
// leases/version, and keeps only max-lease-ms), every lock waits out
// max-lease-ms; after a leader of this version, only what the record says.
func TestCellLeaseRecordAfterAnOlderLeader(t *testing.T) {
	endpoint := testetcd.Start(t)
	n, guard := leading(t, endpoint)
	put := func(key, value string) {
		_, err := n.cli.Put(context.Background(), n.key(key), value)
		require.NoError(t, err)
	}
	put(leasesAll, "1000")
	put(leasesVersion, "1")
	put(legacyMaxMS, "30000")
	put(tokenHWM, "2000") // an older leader took over after the last new one

	older := openCellRecord(t, n, guard)
	all, _ := older.Inherited()
	assert.InDelta(t, 30*time.Second, time.Until(all), float64(time.Second), "every lock waits out max-lease-ms")
	older.Close()

	_, err := n.cli.Txn(context.Background()).Then(
		clientv3.OpPut(n.key(tokenHWM), "3000"), clientv3.OpPut(n.key(leasesVersion), "1"),
		clientv3.OpPut(n.key(leasesAll), strconv.Itoa(1000))).Commit()
	require.NoError(t, err)
	newer := openCellRecord(t, n, guard)
	all, _ = newer.Inherited()
	assert.InDelta(t, time.Second, time.Until(all), float64(500*time.Millisecond), "a leader of this version led last")
	assert.Equal(t, "30000", string(get(t, n, legacyMaxMS).Kvs[0].Value), "max-lease-ms never shrinks")
}

// A write without the leadership is refused: the claim is not admitted.
func TestCellLeaseRecordNeedsTheLeadership(t *testing.T) {
	endpoint := testetcd.Start(t)
	n, _ := leading(t, endpoint)
	lost := clientv3.Compare(clientv3.CreateRevision(n.key("election/none")), "=", 1)
	_, err := leaserecord.OpenStore(&leaseStore{n: n, guard: lost}, leaserecord.Options{})
	require.ErrorContains(t, err, "leadership lost")
}
