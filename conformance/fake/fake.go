// Package fake is the scripted fake server: it accepts client connections,
// sends exact bytes when the scenario says so, optionally answers heartbeats
// by itself after a set delay (an injected round-trip time), and records
// everything the client sent and when.
package fake

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/monolock/monolock/conformance/accepted"
	"github.com/monolock/monolock/conformance/wire"
)

// Server is one fake server for one scenario run.
type Server struct {
	ln    net.Listener
	start time.Time
	conns *accepted.Queue[*Conn]
}

// Listen starts a fake server on a loopback port. Times are measured from start.
func Listen(start time.Time) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{ln: ln, start: start, conns: accepted.New[*Conn]()}
	go s.acceptLoop()
	return s, nil
}

// Addr is the address clients dial.
func (s *Server) Addr() string { return s.ln.Addr().String() }

func (s *Server) now() time.Duration { return time.Since(s.start) }

func (s *Server) acceptLoop() {
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		if tc, ok := nc.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		c := &Conn{srv: s, nc: nc, rec: wire.NewRecord()}
		s.conns.Add(c)
		go c.readLoop()
	}
}

// Accept returns the next connection not yet handed out, waiting until ctx ends.
func (s *Server) Accept(ctx context.Context) (*Conn, error) { return s.conns.Next(ctx) }

// Conns returns every connection accepted so far.
func (s *Server) Conns() []*Conn { return s.conns.All() }

// Close stops listening and closes every connection.
func (s *Server) Close() {
	_ = s.ln.Close()
	for _, c := range s.Conns() {
		_ = c.nc.Close()
	}
}

// Conn is one accepted client connection.
type Conn struct {
	srv *Server
	nc  net.Conn
	rec *wire.Record

	wmu sync.Mutex // serialises writes and their stamps

	mu        sync.Mutex
	consumed  int    // client bytes taken by Recv or the responder
	reply     []byte // responder: bytes sent for each heartbeat; nil = off
	delay     time.Duration
	gen       int // bumped by Silence to cancel replies already scheduled
	closedBy  string
	respondAt int // client frames already handled by the responder
}

// Record is the connection's log.
func (c *Conn) Record() *wire.Record { return c.rec }

func (c *Conn) readLoop() {
	buf := make([]byte, 4096)
	for {
		n, err := c.nc.Read(buf)
		if n > 0 {
			c.rec.Add(c.srv.now(), wire.Up, buf[:n])
			c.respond()
		}
		if err != nil {
			c.mu.Lock()
			ours := c.closedBy != ""
			c.mu.Unlock()
			if !ours {
				c.rec.ClientClosed(c.srv.now())
			}
			c.rec.End()
			return
		}
	}
}

// clientBytes returns the client's bytes so far.
func (c *Conn) clientBytes() ([]byte, <-chan struct{}, time.Duration, []wire.Chunk) {
	chunks, closed, ch := c.rec.Snapshot()
	var b []byte
	for _, ch := range chunks {
		if ch.Dir == wire.Up {
			b = append(b, ch.Data...)
		}
	}
	return b, ch, closed, chunks
}

// Recv waits until the client has sent len(want) more bytes and compares
// them with want. It returns the stamp of the chunk that completed them.
func (c *Conn) Recv(ctx context.Context, want []byte) (time.Duration, error) {
	for {
		b, changed, closed, chunks := c.clientBytes()
		c.mu.Lock()
		from := c.consumed
		if len(b)-from >= len(want) {
			got := b[from : from+len(want)]
			c.consumed += len(want)
			c.mu.Unlock()
			if !bytes.Equal(got, want) {
				return 0, fmt.Errorf("client sent %x, want %x", got, want)
			}
			return stampOf(chunks, from+len(want)), nil
		}
		c.mu.Unlock()
		if closed >= 0 {
			return 0, fmt.Errorf("client closed the connection after %x, want %x", b[from:], want)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return 0, fmt.Errorf("client sent %x, want %x", b[from:], want)
		}
	}
}

// stampOf returns the stamp of the Up chunk holding the n-th client byte.
func stampOf(chunks []wire.Chunk, n int) time.Duration {
	seen := 0
	for _, ch := range chunks {
		if ch.Dir != wire.Up {
			continue
		}
		seen += len(ch.Data)
		if seen >= n {
			return ch.At
		}
	}
	return 0
}

// Send writes b in pieces of chunk bytes (0: one write) with gap between them.
func (c *Conn) Send(ctx context.Context, b []byte, chunk int, gap time.Duration) error {
	if chunk <= 0 {
		chunk = len(b)
	}
	for len(b) > 0 {
		n := min(chunk, len(b))
		if err := c.write(b[:n]); err != nil {
			return err
		}
		b = b[n:]
		if len(b) > 0 && gap > 0 {
			select {
			case <-time.After(gap):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

func (c *Conn) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.rec.Add(c.srv.now(), wire.Down, b)
	_, err := c.nc.Write(b)
	return err
}

// writeLikeServer sends the reply the real server would send to a
// heartbeat now. The write lock makes the choice and the write one step, so
// a promotion written by the script cannot slip in between.
func (c *Conn) writeLikeServer() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	chunks, _, _ := c.rec.Snapshot()
	reply := []byte{wire.Waiting}
	if frames, _, _ := wire.Frames(chunks, wire.Down); len(frames) > 0 {
		for _, f := range frames {
			if f.Type == wire.Acquired {
				reply = f.Raw
			}
		}
	}
	c.rec.Add(c.srv.now(), wire.Down, reply)
	_, err := c.nc.Write(reply)
	return err
}

// Respond turns on the responder: every heartbeat the client sends from now
// on (and any not yet consumed) is answered with reply after delay. An empty
// reply answers like the real server: WAITING until an ACQUIRED has been
// sent on this connection, then that same ACQUIRED.
func (c *Conn) Respond(reply []byte, delay time.Duration) {
	if reply == nil {
		reply = []byte{}
	}
	c.mu.Lock()
	c.reply = append([]byte{}, reply...)
	c.delay = delay
	c.gen++
	c.mu.Unlock()
	c.respond()
}

// Silence turns the responder off and cancels replies already scheduled:
// from now on the server sends nothing by itself.
func (c *Conn) Silence() {
	c.mu.Lock()
	c.reply = nil
	c.gen++
	c.mu.Unlock()
}

// respond answers the heartbeats not yet consumed, if the responder is on.
func (c *Conn) respond() {
	_, _, _, chunks := c.clientBytes()
	frames, _, _ := wire.Frames(chunks, wire.Up)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reply == nil {
		return
	}
	off := 0
	for _, f := range frames {
		off += len(f.Raw)
		if off <= c.consumed {
			continue
		}
		if f.Type != wire.Heartbeat {
			return // leave it for Recv; the checks will see it too
		}
		c.consumed = off
		reply, gen := c.reply, c.gen
		send := func() {
			c.mu.Lock()
			live := c.gen == gen
			c.mu.Unlock()
			if !live {
				return
			}
			if len(reply) == 0 {
				_ = c.writeLikeServer()
			} else {
				_ = c.write(reply)
			}
		}
		if c.delay <= 0 {
			go send()
		} else {
			time.AfterFunc(c.delay, send)
		}
	}
}

// Heartbeats counts the heartbeats the client has sent on this connection.
func (c *Conn) Heartbeats() (int, <-chan struct{}, bool) {
	chunks, closed, ch := c.rec.Snapshot()
	frames, _, _ := wire.Frames(chunks, wire.Up)
	n := 0
	for _, f := range frames {
		if f.Type == wire.Heartbeat {
			n++
		}
	}
	return n, ch, closed >= 0
}

// AwaitClientClose waits until the client ends the connection.
func (c *Conn) AwaitClientClose(ctx context.Context) (time.Duration, error) {
	for {
		_, closed, ch := c.rec.Snapshot()
		if closed >= 0 {
			return closed, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, errors.New("client kept the connection open")
		}
	}
}

// Close closes the connection from the server side (FIN).
func (c *Conn) Close() error {
	c.markClosed("server")
	return c.nc.Close()
}

// Reset aborts the connection from the server side (RST).
func (c *Conn) Reset() error {
	c.markClosed("server")
	if tc, ok := c.nc.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	return c.nc.Close()
}

func (c *Conn) markClosed(by string) {
	c.mu.Lock()
	if c.closedBy == "" {
		c.closedBy = by
	}
	c.gen++
	c.mu.Unlock()
}
