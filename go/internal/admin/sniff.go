package admin

import (
	"io"
	"net"
	"sync"
	"time"
)

// NotHTTPListener answers a connection whose first byte cannot start an
// HTTP request (or a TLS handshake) at once, with a 400 that says what this
// port is, instead of leaving the peer to wait for the header timeout. A
// lock client pointed at the admin port by mistake then learns so in one
// round trip: it sees "HTTP/1.1 400" and reports that the port does not
// speak the monolock protocol.
func NotHTTPListener(ln net.Listener) net.Listener { return sniffListener{ln} }

type sniffListener struct{ net.Listener }

func (l sniffListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &sniffConn{Conn: c}, nil
}

const notHTTP = "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n" +
	"this is the monolock admin API (HTTP); lock clients connect to the lock port (default 7117)\n"

// sniffConn checks the first byte on the first Read, in the HTTP server's
// own goroutine for the connection, so Accept never waits for a peer.
type sniffConn struct {
	net.Conn
	once sync.Once
	err  error
}

// NetConn returns the connection it reads from.
func (c *sniffConn) NetConn() net.Conn { return c.Conn }

func (c *sniffConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n := 0
	c.once.Do(func() {
		n, c.err = c.Conn.Read(p[:1])
		if n == 1 && !startsRequest(p[0]) {
			c.refuse()
			c.err = net.ErrClosed
			n = 0
		}
	})
	if n > 0 || c.err != nil {
		return n, c.err
	}
	return c.Conn.Read(p)
}

// refuse writes the 400 and half-closes, then reads what the peer still
// sends (briefly) before the connection is closed: closing with unread
// input would make the kernel reset the connection and could destroy the
// answer in flight.
func (c *sniffConn) refuse() {
	_ = c.Conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Conn.Write([]byte(notHTTP)); err != nil {
		return
	}
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(c.Conn, 64<<10))
}

// startsRequest reports whether b can begin an HTTP/1 request line (methods
// are upper-case tokens) or a TLS handshake record (0x16, --admin-tls).
func startsRequest(b byte) bool { return b >= 'A' && b <= 'Z' || b == 0x16 }
