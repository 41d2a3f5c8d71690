// Package proxy is the fault proxy: it sits between a client and the real
// server, forwards bytes both ways, records what the client sent and what it
// was delivered, and injects faults on demand: fragment every write into
// single bytes, delay a direction, blackhole a direction, or reset every
// connection.
package proxy

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/monolock/monolock/conformance/accepted"
	"github.com/monolock/monolock/conformance/wire"
)

// Faults is the proxy's current behaviour, per direction (wire.Up, wire.Down).
type Faults struct {
	Fragment  [2]bool
	Delay     [2]time.Duration
	Blackhole [2]bool
}

// Proxy forwards client connections to one upstream address.
type Proxy struct {
	ln       net.Listener
	upstream string
	start    time.Time

	conns *accepted.Queue[*Conn]

	mu     sync.Mutex
	faults Faults
}

// Conn is one proxied client connection.
type Conn struct {
	client, server net.Conn
	rec            *wire.Record

	mu  sync.Mutex
	own *Faults // set by SetFaults: this connection's faults, instead of the proxy's
	// resetting is set by Reset before it aborts both sides, so that the
	// pump of one side does not pass the abort on as a clean close (FIN)
	// before the other side's reset.
	resetting atomic.Bool
}

// SetFaults gives this connection faults of its own, which replace the
// proxy-wide ones for it from now on; other connections are unaffected.
func (c *Conn) SetFaults(f Faults) {
	c.mu.Lock()
	c.own = &f
	c.mu.Unlock()
}

// Faults returns what applies to this connection now: its own faults if
// SetFaults gave it some, else the proxy's.
func (c *Conn) Faults(p *Proxy) Faults {
	c.mu.Lock()
	own := c.own
	c.mu.Unlock()
	if own != nil {
		return *own
	}
	return p.Faults()
}

// Record is the connection's log, seen from the client's side.
func (c *Conn) Record() *wire.Record { return c.rec }

// Listen starts a proxy on a loopback port in front of upstream.
func Listen(upstream string, start time.Time) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, upstream: upstream, start: start, conns: accepted.New[*Conn]()}
	go p.acceptLoop()
	return p, nil
}

// Addr is the address clients dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Set replaces the faults; it applies to bytes read from now on.
func (p *Proxy) Set(f Faults) {
	p.mu.Lock()
	p.faults = f
	p.mu.Unlock()
}

// Faults returns the current faults.
func (p *Proxy) Faults() Faults {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.faults
}

// Conns returns the proxied connections in accept order.
func (p *Proxy) Conns() []*Conn { return p.conns.All() }

// Accept returns the next proxied connection not yet handed out, waiting
// until ctx ends.
func (p *Proxy) Accept(ctx context.Context) (*Conn, error) { return p.conns.Next(ctx) }

// Reset aborts every connection on both sides with a TCP reset.
func (p *Proxy) Reset() {
	for _, c := range p.Conns() {
		c.resetting.Store(true)
		for _, nc := range []net.Conn{c.client, c.server} {
			if tc, ok := nc.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = nc.Close()
		}
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	for _, c := range p.Conns() {
		_ = c.client.Close()
		_ = c.server.Close()
	}
}

func (p *Proxy) now() time.Duration { return time.Since(p.start) }

func (p *Proxy) acceptLoop() {
	for {
		cc, err := p.ln.Accept()
		if err != nil {
			return
		}
		sc, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
		if err != nil {
			_ = cc.Close()
			continue
		}
		for _, nc := range []net.Conn{cc, sc} {
			_ = nc.(*net.TCPConn).SetNoDelay(true)
		}
		c := &Conn{client: cc, server: sc, rec: wire.NewRecord()}
		p.conns.Add(c)
		go p.pump(c, wire.Up)
		go p.pump(c, wire.Down)
	}
}

type piece struct {
	data []byte
	due  time.Time
}

// pump copies one direction. A reader stamps and queues, a writer applies
// delay and fragmentation, so a delay never reorders bytes.
func (p *Proxy) pump(c *Conn, d wire.Dir) {
	src, dst := c.client, c.server
	if d == wire.Down {
		src, dst = c.server, c.client
	}
	queue := make(chan piece, 1024)
	// passEnd is written before queue is closed and read after the range
	// over queue ends, so the channel orders the two.
	passEnd := true
	go func() {
		defer close(queue)
		buf := make([]byte, 4096)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				f := c.Faults(p)
				if d == wire.Up {
					c.rec.Add(p.now(), wire.Up, buf[:n]) // what the client sent
				}
				if !f.Blackhole[d] {
					queue <- piece{append([]byte(nil), buf[:n]...), time.Now().Add(f.Delay[d])}
				}
			}
			if err != nil {
				if d == wire.Up {
					c.rec.ClientClosed(p.now())
				}
				// A blackhole swallows the end of the stream too, as a real
				// partition would: the other side never hears of the close.
				if c.Faults(p).Blackhole[d] {
					passEnd = false
					return
				}
				// The end of the stream is delayed like its bytes: a
				// client's close reaches the server only after the delay.
				queue <- piece{nil, time.Now().Add(c.Faults(p).Delay[d])}
				return
			}
		}
	}()
	for pc := range queue {
		if w := time.Until(pc.due); w > 0 {
			time.Sleep(w)
		}
		frag := c.Faults(p).Fragment[d]
		for len(pc.data) > 0 {
			n := len(pc.data)
			if frag {
				n = 1
			}
			if d == wire.Down {
				c.rec.Add(p.now(), wire.Down, pc.data[:n]) // what the client is delivered
			}
			if _, err := dst.Write(pc.data[:n]); err != nil {
				break
			}
			pc.data = pc.data[n:]
			if frag && len(pc.data) > 0 {
				time.Sleep(time.Millisecond) // let each byte leave as its own segment
			}
		}
	}
	// The source ended: pass the end on, so a closed client frees its lock.
	if !passEnd || c.resetting.Load() {
		return
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}
