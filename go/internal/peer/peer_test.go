package peer

import (
	"crypto/tls"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/testcerts"
)

// serverSide runs a TLS handshake over a pipe and returns the server's end.
func serverSide(t *testing.T, srv, cli *tls.Config) *tls.Conn {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	s, c := tls.Server(a, srv), tls.Client(b, cli)
	done := make(chan error, 1)
	go func() { done <- c.Handshake() }()
	require.NoError(t, s.Handshake())
	require.NoError(t, <-done)
	return s
}

func TestIdentities(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	server := ca.Issue(t, testcerts.Spec{CN: "server", Server: true}).TLS
	full := ca.Issue(t, testcerts.Spec{CN: "svc", DNS: []string{"a.example.org"}, URIs: []string{"spiffe://example.org/svc"}}).TLS
	cnOnly := ca.Issue(t, testcerts.Spec{CN: "svc"}).TLS
	cli := func(cert tls.Certificate) *tls.Config {
		return &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", Certificates: []tls.Certificate{cert}}
	}
	mtls := &tls.Config{Certificates: []tls.Certificate{server}, ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert}

	conn := serverSide(t, mtls, cli(full))
	assert.Equal(t, []string{"cn:svc", "dns:a.example.org", "uri:spiffe://example.org/svc"}, Identities(conn))
	assert.Equal(t, "uri:spiffe://example.org/svc", Primary(conn), "a SPIFFE ID names the client best")

	conn = serverSide(t, mtls, cli(cnOnly))
	assert.Equal(t, "cn:svc", Primary(conn))

	// A certificate the server did not verify is no identity.
	unverified := &tls.Config{Certificates: []tls.Certificate{server}, ClientAuth: tls.RequireAnyClientCert}
	conn = serverSide(t, unverified, cli(cnOnly))
	assert.Equal(t, []string{Anonymous}, Identities(conn))

	plain, other := net.Pipe()
	defer plain.Close()
	defer other.Close()
	assert.Equal(t, Anonymous, Primary(plain))
}
