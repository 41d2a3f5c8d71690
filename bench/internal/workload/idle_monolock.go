package workload

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

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

// IdleMonolock returns the setup that holds n monolock locks by speaking
// the wire protocol directly: one connection per holder, ACQUIRE with the
// lease, then a HEARTBEAT every lease/4 (what a client sends when its RTT
// is negligible). Connections come from 127.0.0.1, 127.0.0.2, ... so more
// than one source address's worth of ephemeral ports can be used.
func IdleMonolock(addr string) idleSetup {
	return func(ctx context.Context, n int, lease time.Duration) (*Holders, error) {
		hctx, stop := context.WithCancel(context.Background())
		g := &hbGen{period: lease / 4, shards: make([]*hbShard, hbShards)}
		for i := range g.shards {
			g.shards[i] = &hbShard{}
		}
		var wg sync.WaitGroup
		for _, sh := range g.shards {
			wg.Add(1)
			go func() { defer wg.Done(); g.run(hctx, sh) }()
		}
		closeAll := func() {
			stop()
			wg.Wait()
			for _, sh := range g.shards {
				for _, c := range sh.conns {
					if c != nil {
						c.Close()
					}
				}
			}
		}
		sources := (n + portsPerSource - 1) / portsPerSource
		leaseMS := uint32(lease.Milliseconds())
		ok, err := parallel(ctx, n, 64, func(i int) error {
			d := net.Dialer{
				Timeout:   10 * time.Second,
				LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(1+i%sources))},
			}
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return err
			}
			frame, _ := protocol.AppendAcquire(nil, fmt.Sprintf("idle/%d", i), leaseMS)
			var reply [9]byte
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.Write(frame); err == nil {
				_, err = io.ReadFull(c, reply[:])
			}
			if err == nil && reply[0] != protocol.MsgAcquired {
				err = fmt.Errorf("reply %s to ACQUIRE", protocol.MsgName(reply[0]))
			}
			if err != nil {
				c.Close()
				return err
			}
			g.shards[i%hbShards].add(c)
			return nil
		})
		if ok < n {
			closeAll()
			return nil, fmt.Errorf("%d of %d monolock holders established: %w", ok, n, err)
		}
		return &Holders{established: ok, refreshes: &g.beats, lost: &g.lost, close: closeAll}, nil
	}
}

type hbGen struct {
	period      time.Duration
	shards      []*hbShard
	beats, lost atomic.Int64
}

type hbShard struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (s *hbShard) add(c net.Conn) {
	s.mu.Lock()
	s.conns = append(s.conns, c)
	s.mu.Unlock()
}

// run sends one HEARTBEAT to each of the shard's connections per period,
// spread evenly over the period, and reads its one-frame ack before the
// next (so at most one heartbeat is in flight per connection).
func (g *hbGen) run(ctx context.Context, s *hbShard) {
	hb := []byte{protocol.MsgHeartbeat}
	var ack [9]byte
	for ctx.Err() == nil {
		round := time.Now()
		s.mu.Lock()
		conns := s.conns[:len(s.conns):len(s.conns)]
		s.mu.Unlock()
		const slots = 50 // pace in 50 steps per period
		for j, c := range conns {
			if c == nil {
				continue
			}
			if j%max(1, len(conns)/slots) == 0 {
				at := round.Add(g.period * time.Duration(j) / time.Duration(len(conns)))
				if !sleepCtx(ctx, time.Until(at)) {
					return
				}
			}
			_ = c.SetDeadline(time.Now().Add(g.period))
			_, err := c.Write(hb)
			if err == nil {
				_, err = io.ReadFull(c, ack[:])
			}
			if err != nil || ack[0] != protocol.MsgAcquired {
				g.lost.Add(1)
				c.Close()
				conns[j] = nil // the shard's slice shares this array
				continue
			}
			g.beats.Add(1)
		}
		if !sleepCtx(ctx, time.Until(round.Add(g.period))) {
			return
		}
	}
}
