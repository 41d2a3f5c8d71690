package client

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/testcerts"
)

func TestTLSFromFiles(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "ca")
	caFile := ca.Write(t, dir, "ca")
	cert, key := ca.Issue(t, testcerts.Spec{CN: "ci"}).Write(t, dir, "ci")

	cfg, err := TLSFromFiles(TLSFiles{CA: caFile, Cert: cert, Key: key, ServerName: "lock.example"})
	require.NoError(t, err)
	assert.Equal(t, uint16(tls.VersionTLS12), cfg.MinVersion)
	assert.Equal(t, "lock.example", cfg.ServerName)
	assert.NotNil(t, cfg.RootCAs)
	assert.Len(t, cfg.Certificates, 1)

	cfg, err = TLSFromFiles(TLSFiles{})
	require.NoError(t, err)
	assert.Nil(t, cfg.RootCAs, "the system's roots")

	notPEM := filepath.Join(dir, "not.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("hello"), 0o600))
	_, err = TLSFromFiles(TLSFiles{CA: notPEM})
	assert.EqualError(t, err, notPEM+": no PEM certificate in it")
	_, err = TLSFromFiles(TLSFiles{Cert: cert})
	assert.ErrorContains(t, err, "needs both its certificate and its key file")
	_, err = TLSFromFiles(TLSFiles{Cert: cert, Key: notPEM})
	assert.ErrorContains(t, err, "client certificate "+cert)
	_, err = TLSFromFiles(TLSFiles{CA: filepath.Join(dir, "missing")})
	assert.ErrorIs(t, err, os.ErrNotExist)
}
