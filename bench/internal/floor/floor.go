// Package floor is the benchmark's floor: the bare exchange of one monolock
// claim over TCP and nothing else (and, in session.go and session_client.go,
// of one claim on an open session). Its server accepts, reads one ACQUIRE
// frame, answers a 9-byte ACQUIRED with an increasing token, waits for the
// client's half-close and closes. Its client dials, writes the ACQUIRE
// frame, reads the 9 bytes, half-closes and reads until the server's close.
// No lock service can do a claim over TCP in fewer steps, so a cycle of the
// two is what the protocol allows on the machine that runs it.
//
// The server runs as `bench floor`, a process of its own, as `monolock
// serve` does (see Main and Start); the client also runs against the real
// server, to separate the server's cost above the floor from the client's.
package floor

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/monolock/monolock/bench/internal/rawclient"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// acquireHeaderLen is an ACQUIRE frame before its name: type, version,
// lease_ms, name_len.
const acquireHeaderLen = 1 + 1 + 4 + 2

// Server answers every ACQUIRE with ACQUIRED: it keeps no lock table, no
// lease and no timer. Tokens grow by one per grant, from 1.
type Server struct {
	token atomic.Uint64
}

// Listen opens a TCP listener the way `monolock serve` does: TCP
// keep-alive off.
func Listen(addr string) (net.Listener, error) {
	lc := net.ListenConfig{KeepAlive: -1}
	return lc.Listen(context.Background(), "tcp", addr)
}

// Serve accepts connections on ln until ln is closed, then returns nil.
func (s *Server) Serve(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var t interface{ Temporary() bool }
			if errors.As(err, &t) && t.Temporary() {
				// Out of file descriptors and the like: wait, do not spin.
				time.Sleep(5 * time.Millisecond)
				continue
			}
			return err
		}
		go s.serveConn(c)
	}
}

// serveConn serves a session when the connection's first byte is SESSION
// (see serveSession), one claim otherwise.
func (s *Server) serveConn(c net.Conn) {
	defer c.Close()
	var buf [acquireHeaderLen + protocol.MaxNameLen]byte
	n, err := c.Read(buf[:])
	if n == 0 {
		return
	}
	if buf[0] == protocol.MsgSession {
		s.serveSession(c, buf[:n])
		return
	}
	s.serveClaim(c, &buf, n, err)
}

// serveClaim is one claim: one ACQUIRE in (its first n bytes in buf
// already, with the error of the read that brought them), one ACQUIRED
// out, then the client's half-close. Anything that is not a version-1
// ACQUIRE with a name of at most MaxNameLen bytes just closes the
// connection.
func (s *Server) serveClaim(c net.Conn, buf *[acquireHeaderLen + protocol.MaxNameLen]byte, n int, err error) {
	need := acquireHeaderLen
	for {
		if n >= acquireHeaderLen && need == acquireHeaderLen {
			if buf[0] != protocol.MsgAcquire || buf[1] != protocol.Version {
				return
			}
			nameLen := int(binary.BigEndian.Uint16(buf[6:8]))
			if nameLen == 0 || nameLen > protocol.MaxNameLen {
				return
			}
			need += nameLen
		}
		if n >= need {
			break
		}
		if err != nil {
			return
		}
		var m int
		m, err = c.Read(buf[n:])
		n += m
	}
	var reply [9]byte
	if _, err := c.Write(protocol.AppendAcquired(reply[:0], s.token.Add(1))); err != nil {
		return
	}
	// Wait for the client's half-close; a client sends nothing else.
	for {
		if _, err := c.Read(buf[:]); err != nil {
			return
		}
	}
}

// Client is the bare client for one worker: one claim at a time, each on
// a connection of its own. It sets no deadline and starts no goroutine per
// claim; a cancelled context closes the connection of the claim in flight.
type Client struct {
	addr  string
	lease uint32
	d     net.Dialer
	frame []byte
	raw   rawclient.Conn // the claim in flight's session, reused by the next

	// cur is the connection of the claim in flight, for the watch.
	cur       atomic.Pointer[net.TCPConn]
	watched   <-chan struct{} // Done of the context being watched
	stopWatch func() bool
}

// NewClient returns a bare client of the server at addr, asking for lease
// (rounded to whole milliseconds, at least 1).
func NewClient(addr string, lease time.Duration) *Client {
	ms := min(max(lease.Milliseconds(), 1), int64(^uint32(0)))
	return &Client{addr: addr, lease: uint32(ms), d: net.Dialer{KeepAlive: -1}, frame: make([]byte, 0, acquireHeaderLen+protocol.MaxNameLen)}
}

// Claim is one granted claim of a bare client.
type Claim struct {
	c     *Client
	conn  *net.TCPConn
	Token uint64
}

// Acquire connects, sends ACQUIRE for name and reads the ACQUIRED. A
// WAITING or ERROR reply is an error: the bare client does not queue.
func (c *Client) Acquire(ctx context.Context, name string) (*Claim, error) {
	frame, err := protocol.AppendAcquire(c.frame[:0], name, c.lease)
	if err != nil {
		return nil, err
	}
	c.frame = frame
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.watch(ctx)
	// A context that cannot be cancelled keeps net from starting a
	// goroutine per dial; on loopback a connect completes or is refused
	// at once.
	nc, err := c.d.DialContext(context.Background(), "tcp", c.addr)
	if err != nil {
		return nil, err
	}
	conn := nc.(*net.TCPConn)
	c.cur.Store(conn)
	if err := ctx.Err(); err != nil { // the watch may have run before the Store
		c.drop(conn)
		return nil, err
	}
	c.raw.Reset(conn)
	token, err := c.raw.Acquire(frame, 0)
	if err != nil {
		c.drop(conn)
		return nil, err
	}
	return &Claim{c: c, conn: conn, Token: token}, nil
}

// Release half-closes and reads until the server's close: when it returns,
// the server has let the lock go.
func (cl *Claim) Release() error {
	defer cl.c.drop(cl.conn)
	return cl.c.raw.Release()
}

func (c *Client) drop(conn *net.TCPConn) {
	c.cur.CompareAndSwap(conn, nil)
	conn.Close()
}

// watch makes the end of ctx close the connection in flight. The workload
// passes the same context to every Acquire of a cell, so this registers
// once per cell, not once per claim.
func (c *Client) watch(ctx context.Context) {
	done := ctx.Done()
	if done == nil || done == c.watched {
		return
	}
	if c.stopWatch != nil {
		c.stopWatch()
	}
	c.watched = done
	c.stopWatch = context.AfterFunc(ctx, func() {
		if conn := c.cur.Load(); conn != nil {
			conn.Close()
		}
	})
}

// Close stops the client's watch; it does not touch a claim in flight.
func (c *Client) Close() error {
	if c.stopWatch != nil {
		c.stopWatch()
		c.stopWatch, c.watched = nil, nil
	}
	return nil
}
