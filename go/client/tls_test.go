package client

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/testcerts"
)

func TestTLS(t *testing.T) {
	cert, pool := testcerts.LoopbackServer(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	require.NoError(t, err)
	srv := newFakeServerOn(t, ln)

	// ServerName is left empty: the client takes the host of the address.
	c := newClient(t, srv.addr(), time.Second, WithTLS(&tls.Config{RootCAs: pool}))
	lock, conn, _ := grant(t, srv, c, "tls", 77)
	require.Equal(t, uint64(77), lock.Token())
	require.NoError(t, lock.Release())
	conn.expectClosed()

	// A client that does not trust the certificate never gets to ACQUIRE.
	untrusting := newClient(t, srv.addr(), time.Second, WithTLS(&tls.Config{}))
	_, err = untrusting.TryAcquire(context.Background(), "tls")
	require.ErrorIs(t, err, ErrUnavailable)
	var certErr *tls.CertificateVerificationError
	require.ErrorAs(t, err, &certErr)
}
