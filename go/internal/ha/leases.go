package ha

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/monolock/monolock/go/internal/leaserecord"
)

// The cell's lease record (leaserecord.Record) in etcd, written only by the
// leader, under its leadership guard:
//
//	PREFIX leases/all          the wait for every lock, ms
//	PREFIX leases/lock/NAME    a lock's longer wait, ms
//	PREFIX leases/version      "1", written with every token-hwm update
//	PREFIX max-lease-ms        the longest wait ever stated, for servers of
//	                           earlier versions, which wait it for every lock
//
// A wait is counted from the next leader's takeover, which comes after
// every acknowledgement of this leader (docs/ha.md).
//
// Earlier versions keep only max-lease-ms, and raise it before they
// acknowledge a longer lease; they do not write leases/version. Every
// leader writes token-hwm when it takes over, so a token-hwm written after
// leases/version (a later mod revision) means that a leader of an earlier
// version led since, and may have acknowledged any lease up to
// max-lease-ms on any lock: then every lock waits max-lease-ms. A cell
// that is being upgraded so stays safe, at the old cost.
const (
	leasesAll     = "leases/all"
	leasesLock    = "leases/lock/"
	leasesVersion = "leases/version"
	legacyMaxMS   = "max-lease-ms"
	tokenHWM      = "token-hwm"
)

// maxTxnOps keeps each transaction under etcd's default limit of 128
// operations (--max-txn-ops); a longer change is several transactions,
// each under the guard.
const maxTxnOps = 100

// leaseStore is a leaserecord.Store in etcd, for one term of leadership.
type leaseStore struct {
	n     *Node
	guard clientv3.Cmp
	names map[string]struct{} // the names etcd states a wait for
	maxMS int64               // max-lease-ms as etcd has it
}

// Load reads the record under the guard.
func (s *leaseStore) Load() (time.Duration, map[string]time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.n.cfg.TTL/2)
	defer cancel()
	resp, err := s.n.cli.Txn(ctx).If(s.guard).Then(
		clientv3.OpGet(s.n.key("leases/"), clientv3.WithPrefix()),
		clientv3.OpGet(s.n.key(legacyMaxMS)),
		clientv3.OpGet(s.n.key(tokenHWM)),
	).Commit()
	if err != nil {
		return 0, nil, err
	}
	if !resp.Succeeded {
		return 0, nil, errors.New("leadership lost while reading the lease record")
	}
	var all time.Duration
	var versionRev int64
	locks := make(map[string]time.Duration)
	s.names = make(map[string]struct{})
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		key := strings.TrimPrefix(string(kv.Key), s.n.cfg.Prefix)
		if key == leasesVersion {
			versionRev = kv.ModRevision
			continue
		}
		wait, err := msValue(kv.Value)
		if err != nil {
			return 0, nil, fmt.Errorf("%s: %w", kv.Key, err)
		}
		switch name, isLock := strings.CutPrefix(key, leasesLock); {
		case key == leasesAll:
			all = wait
		case isLock && name != "":
			locks[name] = wait
			s.names[name] = struct{}{}
		default:
			return 0, nil, fmt.Errorf("%s: not a key of the lease record", kv.Key)
		}
	}
	legacy := time.Duration(0)
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
		if legacy, err = msValue(kvs[0].Value); err != nil {
			return 0, nil, fmt.Errorf("%s: %w", legacyMaxMS, err)
		}
		s.maxMS = legacy.Milliseconds()
	}
	if kvs := resp.Responses[2].GetResponseRange().Kvs; len(kvs) > 0 && kvs[0].ModRevision > versionRev {
		all = max(all, legacy) // a leader of an earlier version led last
	}
	return all, locks, nil
}

func msValue(v []byte) (time.Duration, error) {
	ms, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || ms < 0 || ms > int64(time.Duration(1<<63-1)/time.Millisecond) {
		return 0, fmt.Errorf("not a number of milliseconds: %q", v)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// WantsFull: etcd keys are rewritten in place; only a failed write asks
// for a full one (the Record does that itself).
func (s *leaseStore) WantsFull() bool { return false }

func (s *leaseStore) Write(c leaserecord.Change) error {
	var ops []clientv3.Op
	longest := c.All
	if c.AllSet {
		ops = append(ops, clientv3.OpPut(s.n.key(leasesAll), strconv.FormatInt(c.All.Milliseconds(), 10)))
	}
	stated := make(map[string]bool, len(c.Locks))
	for _, st := range c.Locks {
		stated[st.Name] = true
		if st.Wait == 0 {
			ops = append(ops, clientv3.OpDelete(s.n.key(leasesLock+st.Name)))
			continue
		}
		longest = max(longest, st.Wait)
		ops = append(ops, clientv3.OpPut(s.n.key(leasesLock+st.Name), strconv.FormatInt(st.Wait.Milliseconds(), 10)))
	}
	if c.Full {
		for name := range s.names {
			if !stated[name] {
				ops = append(ops, clientv3.OpDelete(s.n.key(leasesLock+name)))
			}
		}
	}
	raise := longest.Milliseconds() > s.maxMS
	if raise {
		ops = append(ops, clientv3.OpPut(s.n.key(legacyMaxMS), strconv.FormatInt(longest.Milliseconds(), 10)))
	}
	// A write cut between two transactions may leave some of its puts:
	// count them as there, so that a later full write drops them.
	for _, st := range c.Locks {
		if st.Wait != 0 {
			s.names[st.Name] = struct{}{}
		}
	}
	for len(ops) > 0 {
		n := min(len(ops), maxTxnOps)
		if err := s.commit(ops[:n]); err != nil {
			return err
		}
		ops = ops[n:]
	}
	if raise {
		s.maxMS = longest.Milliseconds()
	}
	if c.Full {
		s.names = make(map[string]struct{}, len(c.Locks))
	}
	for _, st := range c.Locks {
		if st.Wait == 0 {
			delete(s.names, st.Name)
		} else {
			s.names[st.Name] = struct{}{}
		}
	}
	return nil
}

func (s *leaseStore) commit(ops []clientv3.Op) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.n.cfg.TTL/2)
	defer cancel()
	resp, err := s.n.cli.Txn(ctx).If(s.guard).Then(ops...).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return errors.New("ha: leadership lost")
	}
	return nil
}

func (s *leaseStore) Close() {}
