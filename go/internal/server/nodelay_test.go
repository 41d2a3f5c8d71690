package server

import (
	"net"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recordingListener keeps the connections it accepts, to inspect the
// server's end of them.
type recordingListener struct {
	net.Listener
	accepted chan net.Conn
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted <- c
	}
	return c, err
}

func TestAcceptedConnectionsUseTCPNoDelay(t *testing.T) {
	accepted := make(chan net.Conn, 1)
	srv := startServerOn(t, Config{}, func(ln net.Listener) net.Listener {
		return &recordingListener{Listener: ln, accepted: accepted}
	})

	c := dial(t, srv.addr)
	c.acquire("nodelay", 60000)
	c.expectAcquired() // the session is set up by now
	serverEnd := (<-accepted).(*net.TCPConn)
	raw, err := serverEnd.SyscallConn()
	require.NoError(t, err)
	var nodelay int
	var serr error
	require.NoError(t, raw.Control(func(fd uintptr) {
		nodelay, serr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_NODELAY)
	}))
	require.NoError(t, serr)
	assert.NotZero(t, nodelay)
	c.conn.Close()
}
