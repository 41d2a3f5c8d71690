package client

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// selfSigned returns a certificate for 127.0.0.1 and a pool trusting it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "monolock test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

func TestTLS(t *testing.T) {
	cert, pool := selfSigned(t)
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
