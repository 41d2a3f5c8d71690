package workload

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/monolock/monolock/bench/internal/rawclient"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// portsPerSource is how many client ports one 127.x source address is
// given: far below the kernel's ephemeral range (about 28k ports), because
// the throughput workloads leave many of those ports in TIME_WAIT on
// 127.0.0.1, and connect() slows down as it searches for a free one.
const portsPerSource = 5000

// hbShards is how many goroutines send heartbeats; each owns a slice of
// the connections and walks it once per heartbeat interval.
const hbShards = 64

// IdleMonolock returns the setup that holds n monolock locks through
// OpenIdleSessions.
func IdleMonolock(addr string) IdleSetup {
	return func(ctx context.Context, n int, lease time.Duration) (*Holders, error) {
		s, err := OpenIdleSessions(ctx, addr, n, lease)
		if err != nil {
			return nil, err
		}
		return NewHolders(n, &s.beats, &s.lost, s.Close), nil
	}
}

// IdleSessions holds monolock locks by speaking the wire protocol
// directly: one connection per holder, ACQUIRE with the lease, then a
// HEARTBEAT every lease/4 (what a client sends when its RTT is
// negligible), each ack read before the next.
type IdleSessions struct {
	period      time.Duration
	shards      [hbShards]idleShard
	beats, lost atomic.Int64
	stop        context.CancelFunc
	wg          sync.WaitGroup
}

type idleShard struct {
	mu    sync.Mutex
	conns []*rawclient.Conn
}

// sourceSubnets hands every OpenIdleSessions a fresh 127.0.x.0/24, so that
// no source port an earlier run used is asked for again.
var sourceSubnets atomic.Int32

// OpenIdleSessions opens n sessions to addr, each holding the lock
// idle/<i> with lease, and keeps them alive until Close. Connections come
// from 127.0.x.1, 127.0.x.2, ... so that more than one source address's
// worth of ephemeral ports can be used. It fails unless all n hold.
func OpenIdleSessions(ctx context.Context, addr string, n int, lease time.Duration) (*IdleSessions, error) {
	hctx, stop := context.WithCancel(context.Background())
	s := &IdleSessions{period: lease / 4, stop: stop}
	for i := range s.shards {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.heartbeat(hctx, &s.shards[i]) }()
	}
	sources := (n + portsPerSource - 1) / portsPerSource
	subnet := byte(1 + sourceSubnets.Add(1)%250)
	leaseMS := uint32(lease.Milliseconds())
	ok, err := Parallel(ctx, n, 64, func(i int) error {
		return s.open(ctx, addr, fmt.Sprintf("idle/%d", i), net.IPv4(127, 0, subnet, byte(1+i%sources)), leaseMS, &s.shards[i%hbShards])
	})
	if ok < n {
		s.Close()
		return nil, fmt.Errorf("%d of %d monolock sessions established: %w", ok, n, err)
	}
	return s, nil
}

// Beats is how many heartbeats have been acknowledged so far.
func (s *IdleSessions) Beats() int64 { return s.beats.Load() }

// Lost is how many sessions have failed a heartbeat so far.
func (s *IdleSessions) Lost() int64 { return s.lost.Load() }

// Close stops the heartbeats and closes every session.
func (s *IdleSessions) Close() {
	s.stop()
	s.wg.Wait()
	for i := range s.shards {
		for _, c := range s.shards[i].conns {
			if c != nil {
				c.TCP.Close()
			}
		}
	}
}

// open connects from source, acquires name and adds the session to sh.
func (s *IdleSessions) open(ctx context.Context, addr, name string, source net.IP, leaseMS uint32, sh *idleShard) error {
	d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: source}}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	tcp := c.(*net.TCPConn)
	// Closed with a reset: no TIME_WAIT left behind for the next run.
	_ = tcp.SetLinger(0)
	frame, _ := protocol.AppendAcquire(nil, name, leaseMS)
	_ = tcp.SetDeadline(time.Now().Add(10 * time.Second))
	rc := &rawclient.Conn{}
	rc.Reset(tcp)
	// One WAITING may come first: the token store was reserving its next
	// block, and the grant follows as soon as the block is durable.
	if _, err := rc.Acquire(frame, 1); err != nil {
		tcp.Close()
		return err
	}
	sh.mu.Lock()
	sh.conns = append(sh.conns, rc)
	sh.mu.Unlock()
	return nil
}

// heartbeat sends one HEARTBEAT to each of the shard's connections per
// period, spread evenly over the period, and reads its one-frame ack
// before the next (so at most one heartbeat is in flight per connection).
func (s *IdleSessions) heartbeat(ctx context.Context, sh *idleShard) {
	for ctx.Err() == nil {
		round := time.Now()
		sh.mu.Lock()
		conns := sh.conns[:len(sh.conns):len(sh.conns)]
		sh.mu.Unlock()
		const slots = 50 // pace in 50 steps per period
		for j, c := range conns {
			if c == nil {
				continue
			}
			if j%max(1, len(conns)/slots) == 0 {
				at := round.Add(s.period * time.Duration(j) / time.Duration(len(conns)))
				if !SleepCtx(ctx, time.Until(at)) {
					return
				}
			}
			_ = c.TCP.SetDeadline(time.Now().Add(s.period))
			if err := c.Heartbeat(); err != nil {
				s.lost.Add(1)
				c.TCP.Close()
				conns[j] = nil // the shard's slice shares this array
				continue
			}
			s.beats.Add(1)
		}
		if !SleepCtx(ctx, time.Until(round.Add(s.period))) {
			return
		}
	}
}
