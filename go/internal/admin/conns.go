package admin

import (
	"net"
	"sync"
	"sync/atomic"
)

// LimitListener lets at most max connections be open at once: one
// accepted beyond that is closed at once, before anything is read from
// it, and refused (if not nil) is called. Nothing waits in a queue, so the
// admin port can never hold more than max+1 file descriptors (the +1
// being closed), however many peers connect and however long they stay:
// that is what keeps it from taking the lock port's descriptors. It
// counts before TLS or HTTP see a connection, so a peer need not
// authenticate to be counted, and cannot stay uncounted by not doing so.
func LimitListener(ln net.Listener, max int, refused func()) net.Listener {
	return &limitListener{Listener: ln, max: int64(max), refused: refused}
}

type limitListener struct {
	net.Listener
	max     int64
	open    atomic.Int64
	refused func()
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= l.max {
			return &limitedConn{Conn: c, open: &l.open}, nil
		}
		l.open.Add(-1)
		c.Close()
		if l.refused != nil {
			l.refused()
		}
	}
}

// limitedConn gives its place back once, on its first Close.
type limitedConn struct {
	net.Conn
	open *atomic.Int64
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.open.Add(-1) })
	return err
}
