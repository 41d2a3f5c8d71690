package server

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync/atomic"
)

// NewTLSListener is tls.NewListener for the lock port, which also notes
// whether each connection's TCP stream ended (a FIN) without a TLS
// close_notify first. Anyone on the path can inject a FIN; only the client
// can send a close_notify. Such an end is a reset, on a single-claim
// connection as on a session of streams: the claims are held until the
// lease after the last frame, never released by a forged end. (Go's TLS layer
// reports both ends as io.EOF, so the raw stream is watched here.)
func NewTLSListener(inner net.Listener, cfg *tls.Config) net.Listener {
	return &tlsListener{Listener: inner, cfg: cfg}
}

type tlsListener struct {
	net.Listener
	cfg *tls.Config
}

func (l *tlsListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return tls.Server(&finWatch{Conn: c}, l.cfg), nil
}

// finWatch is a TLS connection's TCP stream, noting its end.
type finWatch struct {
	net.Conn
	fin atomic.Bool
}

func (f *finWatch) Read(p []byte) (int, error) {
	n, err := f.Conn.Read(p)
	if errors.Is(err, io.EOF) {
		f.fin.Store(true)
	}
	return n, err
}

// endedWithoutCloseNotify reports whether conn is a TLS connection whose
// TCP stream ended without a close_notify (read through NewTLSListener).
// The TLS layer stops reading at a close_notify, so a FIN seen below it
// came without one.
func endedWithoutCloseNotify(conn net.Conn) bool {
	tc, ok := conn.(*tls.Conn)
	if !ok {
		return false
	}
	fw, ok := tc.NetConn().(*finWatch)
	return ok && fw.fin.Load()
}
