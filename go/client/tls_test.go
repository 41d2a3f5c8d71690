package client

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/server"
	"github.com/monolock/monolock/go/internal/testcerts"
	"github.com/monolock/monolock/go/internal/testserver"
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

// A certificate problem fails a waiting Acquire at once, not at its
// deadline: a server certificate this client does not trust, and a server
// that refuses this client's missing certificate (TLS 1.3 says so on the
// first read, after the client sent its ACQUIRE). Neither server is asked
// twice; a good server after a bad one is used.
func TestCertificateProblemsFailAtOnce(t *testing.T) {
	ca := testcerts.NewCA(t, "cert-problems")
	serverCert := ca.Issue(t, testcerts.Spec{CN: "server", Server: true}).TLS
	listen := func(cfg *tls.Config) *fakeServer {
		ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
		require.NoError(t, err)
		return newFakeServerOn(t, ln)
	}
	plain := listen(&tls.Config{Certificates: []tls.Certificate{serverCert}})
	mutual := listen(&tls.Config{Certificates: []tls.Certificate{serverCert},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool()})

	for _, tc := range []struct {
		name string
		srv  *fakeServer
		cfg  *tls.Config
		hint string
	}{
		{"untrusted server", plain, &tls.Config{}, "the server's certificate is not trusted"},
		{"wrong server name", plain, &tls.Config{RootCAs: ca.Pool(), ServerName: "wrong.example"}, "the server's certificate is not trusted"},
		{"no client certificate", mutual, &tls.Config{RootCAs: ca.Pool()}, "the server refused this client's certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, tc.srv.addr(), time.Second, WithTLS(tc.cfg))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := time.Now()
			_, err := c.Acquire(ctx, "tls")
			require.ErrorIs(t, err, ErrUnavailable)
			require.NotErrorIs(t, err, context.DeadlineExceeded)
			require.Contains(t, err.Error(), tc.hint)
			require.Less(t, time.Since(start), 10*time.Second, "at once, not at the deadline")
			tc.srv.accept()
			tc.srv.noConnection(300 * time.Millisecond)
		})
	}

	// With a bad server first in the list, the good one after it grants.
	good := listen(&tls.Config{Certificates: []tls.Certificate{serverCert}})
	c := newClient(t, mutual.addr(), time.Second, WithTLS(&tls.Config{RootCAs: ca.Pool()}), WithServers(mutual.addr(), good.addr()))
	done := acquireAsync(ctxTimeout(t, wait), c, "tls", false)
	mutual.accept()
	conn := good.accept()
	conn.expectAcquire("tls", time.Second)
	conn.send(acquired(5))
	r := result(t, done)
	require.NoError(t, r.err)
	require.NoError(t, r.lock.Release())
}

// A claim on a connection of its own resumes the TLS session of an
// earlier one: the client keeps a session cache and the release's
// close_notify keeps the ticket good.
func TestTLSClaimsResume(t *testing.T) {
	cert, pool := testcerts.LoopbackServer(t)
	srv := testserver.StartOn(t, server.Config{}, 10*time.Second, func(ln net.Listener) net.Listener {
		return server.NewTLSListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
	})
	var resumed []bool
	var mu sync.Mutex
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13, VerifyConnection: func(cs tls.ConnectionState) error {
		mu.Lock()
		defer mu.Unlock()
		resumed = append(resumed, cs.DidResume)
		return nil
	}}
	c := newClient(t, srv.Addr, 2*time.Second, WithTLS(cfg))
	for i := range 3 {
		l, err := c.Acquire(ctxTimeout(t, wait), fmt.Sprintf("tls/resume/%d", i))
		require.NoError(t, err)
		require.NoError(t, l.Release())
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []bool{false, true, true}, resumed, "the first handshake is full, the next ones resume")
	require.Nil(t, cfg.ClientSessionCache, "the caller's configuration is left as it was")
}
