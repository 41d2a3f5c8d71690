package server

import (
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/testcerts"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// The TLS seam: Serve on a tls.NewListener speaks the same protocol, and an
// ERROR still arrives before the close.
func TestServeOverTLS(t *testing.T) {
	cert, pool := testcerts.LoopbackServer(t)
	srv := startServerOn(t, Config{}, func(ln net.Listener) net.Listener {
		return tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
	})

	conn, err := tls.Dial("tcp", srv.addr, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13})
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(replyTimeout)))
	acq, err := protocol.AppendAcquire(nil, "tls", 60000)
	require.NoError(t, err)
	_, err = conn.Write(append(acq, protocol.MsgHeartbeat, 0x7f))
	require.NoError(t, err)

	want := append(protocol.AppendAcquired(nil, 1), protocol.AppendAcquired(nil, 1)...)
	want = protocol.AppendError(want, protocol.ErrUnknownMessage.Code, "unknown message type: 0x7f")
	got := make([]byte, len(want))
	_, err = io.ReadFull(conn, got)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	_, err = conn.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF)
}

// A lock client that speaks plaintext to the TLS port gets a plaintext
// ERROR 0x10 that says the port speaks TLS, not a silent close it would
// retry forever.
func TestPlaintextAcquireToTLSPortIsTold(t *testing.T) {
	cert, _ := testcerts.LoopbackServer(t)
	srv := startServerOn(t, Config{}, func(ln net.Listener) net.Listener {
		return tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
	})
	c := dial(t, srv.addr)
	c.acquire("plain", 60000)
	f := c.expectError(protocol.ErrUnsupportedVersion)
	assert.Equal(t, "this port speaks TLS: connect with TLS", f.Reason)
	c.expectClosed()
}
