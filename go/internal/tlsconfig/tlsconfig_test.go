package tlsconfig

import (
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/testcerts"
)

func TestLoadErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "ca")
	cert, key := ca.Issue(t, testcerts.Spec{CN: "server", Server: true}).Write(t, dir, "server")

	_, err := Load(Files{Cert: cert})
	assert.ErrorContains(t, err, "needs both")
	_, err = Load(Files{Cert: cert, Key: filepath.Join(dir, "missing.key")})
	assert.ErrorContains(t, err, "missing.key")
	junk := filepath.Join(dir, "junk.pem")
	require.NoError(t, os.WriteFile(junk, []byte("not a certificate"), 0o600))
	_, err = Load(Files{Cert: cert, Key: key, ClientCA: junk})
	assert.ErrorContains(t, err, "no PEM certificate")

	r, err := Load(Files{Cert: cert, Key: key, ClientCA: ca.Write(t, dir, "ca")})
	require.NoError(t, err)
	assert.True(t, r.MutualTLS())
}

// handshake connects a client to a listener using cfg and returns the
// server's leaf certificate as the client saw it, or the handshake error.
func handshake(t *testing.T, srvCfg *tls.Config, cli *tls.Config) (string, error) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srvCfg)
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	c := tls.Client(raw, cli)
	defer c.Close()
	if err := c.Handshake(); err != nil {
		return "", err
	}
	// With TLS 1.3 a rejected client certificate shows on the first read.
	if _, err := c.Read(make([]byte, 1)); err != nil && !isEOF(err) {
		return "", err
	}
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
}

func isEOF(err error) bool { return err.Error() == "EOF" }

// Reload swaps the certificate for new handshakes; mutual TLS refuses a
// client without a certificate and negotiates TLS 1.3.
func TestReloadAndMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "ca")
	cert, key := ca.Issue(t, testcerts.Spec{CN: "first", Server: true}).Write(t, dir, "server")
	r, err := Load(Files{Cert: cert, Key: key, ClientCA: ca.Write(t, dir, "ca")})
	require.NoError(t, err)
	clientCert := ca.Issue(t, testcerts.Spec{CN: "alice"}).TLS
	cli := &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", Certificates: []tls.Certificate{clientCert}}

	cn, err := handshake(t, r.Server(), cli)
	require.NoError(t, err)
	assert.Equal(t, "first", cn)

	_, err = handshake(t, r.Server(), &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"})
	assert.Error(t, err, "a client without a certificate is refused")

	ca.Issue(t, testcerts.Spec{CN: "second", Server: true}).Write(t, dir, "server")
	require.NoError(t, r.Reload())
	cn, err = handshake(t, r.Server(), cli)
	require.NoError(t, err)
	assert.Equal(t, "second", cn)

	// The admin side asks for no client certificate.
	cn, err = handshake(t, r.Admin(), &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"})
	require.NoError(t, err)
	assert.Equal(t, "second", cn)

	// A failed reload keeps the settings in force.
	require.NoError(t, os.WriteFile(key, []byte("garbage"), 0o600))
	assert.Error(t, r.Reload())
	cn, err = handshake(t, r.Server(), cli)
	require.NoError(t, err)
	assert.Equal(t, "second", cn)

	// TLS 1.2 is the floor.
	_, err = handshake(t, r.Server(), &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost",
		Certificates: []tls.Certificate{clientCert}, MaxVersion: tls.VersionTLS11})
	assert.Error(t, err)
}
