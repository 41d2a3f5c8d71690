package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/client"
	"github.com/monolock/monolock/go/internal/testtools"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// certs runs `monolock certs args...` and requires it to succeed.
func certs(t *testing.T, args ...string) string {
	t.Helper()
	code, stdout, stderr := command(t, nil, append([]string{"certs"}, args...)...)
	require.Equal(t, 0, code, "monolock certs %v: %s", args, stderr)
	return stdout
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	block, _ := pem.Decode(b)
	require.NotNil(t, block, "%s: no PEM", path)
	c, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	return c
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	require.NoError(t, err)
	return st.Mode().Perm()
}

// What each command writes: a P-256 CA that signs leaves only, a server
// certificate whose --host values are sorted into IP and DNS SANs, client
// certificates for clientAuth with the identities the ACL matches; keys
// 0600; validity from --days.
func TestCertsWritesTheCertificates(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki") // created by init
	out := certs(t, "init", dir)
	assert.Contains(t, out, filepath.Join(dir, "ca.crt"))
	certs(t, "server", "--dir", dir, "--host", "127.0.0.1", "--host", "localhost,Lock.Example.com", "--host", "::1",
		"--host", "localhost")
	certs(t, "client", "--dir", dir, "--cn", "deployer", "--days", "30")
	certs(t, "client", "--dir", dir, "--cn", "ci runner", "--out", "runner",
		"--uri", "spiffe://example.org/ns/ci/sa/runner", "--dns", "r1.workers.example.org")

	ca := readCert(t, filepath.Join(dir, "ca.crt"))
	assert.True(t, ca.IsCA)
	assert.True(t, ca.MaxPathLenZero)
	assert.Equal(t, "monolock CA", ca.Subject.CommonName)
	assert.WithinDuration(t, time.Now().AddDate(0, 0, 3650), ca.NotAfter, 48*time.Hour, "CA: 3650 days")
	assert.Equal(t, elliptic.P256(), ca.PublicKey.(*ecdsa.PublicKey).Curve)
	pool := x509.NewCertPool()
	pool.AddCert(ca)

	srv := readCert(t, filepath.Join(dir, "server.crt"))
	assert.Equal(t, "127.0.0.1", srv.Subject.CommonName, "the first --host")
	assert.Equal(t, []string{"localhost", "lock.example.com"}, srv.DNSNames, "deduplicated, lower case")
	require.Len(t, srv.IPAddresses, 2)
	assert.True(t, srv.IPAddresses[0].Equal(net.IPv4(127, 0, 0, 1)))
	assert.True(t, srv.IPAddresses[1].Equal(net.IPv6loopback))
	assert.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, srv.ExtKeyUsage)
	assert.WithinDuration(t, time.Now().AddDate(0, 0, 365), srv.NotAfter, 48*time.Hour, "leaf: 365 days")
	for _, host := range []string{"127.0.0.1", "::1", "localhost", "lock.example.com"} {
		_, err := srv.Verify(x509.VerifyOptions{Roots: pool, DNSName: host})
		assert.NoError(t, err, host)
	}

	dep := readCert(t, filepath.Join(dir, "deployer.crt"))
	assert.Equal(t, "deployer", dep.Subject.CommonName)
	assert.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, dep.ExtKeyUsage)
	assert.WithinDuration(t, time.Now().AddDate(0, 0, 30), dep.NotAfter, 48*time.Hour, "--days 30")
	_, err := dep.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	assert.NoError(t, err)

	run := readCert(t, filepath.Join(dir, "runner.crt"))
	assert.Equal(t, "ci runner", run.Subject.CommonName)
	assert.Equal(t, []string{"r1.workers.example.org"}, run.DNSNames)
	require.Len(t, run.URIs, 1)
	assert.Equal(t, "spiffe://example.org/ns/ci/sa/runner", run.URIs[0].String())

	for _, name := range []string{"ca", "server", "deployer", "runner"} {
		assert.Equal(t, os.FileMode(0o600), mode(t, filepath.Join(dir, name+".key")), name)
		assert.Equal(t, os.FileMode(0o644), mode(t, filepath.Join(dir, name+".crt")), name)
		_, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"))
		assert.NoError(t, err, name)
	}
	left, err := filepath.Glob(filepath.Join(dir, ".*"))
	require.NoError(t, err)
	assert.Empty(t, left, "no temporary files left behind")
}

// Existing files stay unless --force; bad input is one clear line, and
// nothing is written.
func TestCertsRefusesOverwritesAndBadInput(t *testing.T) {
	dir := t.TempDir()
	certs(t, "init", dir)
	caBefore, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	require.NoError(t, err)
	certs(t, "client", "--dir", dir, "--cn", "deployer")

	cases := []struct {
		code int
		args []string
		want string
	}{
		{1, []string{"init", dir}, "ca.crt exists; not overwriting it (use --force to replace it)"},
		{1, []string{"client", "--dir", dir, "--cn", "deployer"}, "deployer.crt exists; not overwriting it"},
		{1, []string{"server", "--dir", filepath.Join(dir, "nothing"), "--host", "localhost"}, "no CA in " + filepath.Join(dir, "nothing")},
		{2, []string{"server", "--dir", dir}, "no --host given"},
		{2, []string{"server", "--dir", dir, "--host", "127.0.0.1:7117"}, `--host "127.0.0.1:7117": want an IP address or a DNS name`},
		{2, []string{"server", "--dir", dir, "--host", "https://lock.example.com"}, "no port, scheme or path"},
		{2, []string{"server", "--host", "localhost"}, "no directory given (--dir DIR)"},
		{2, []string{"client", "--dir", dir}, "no --cn given"},
		{2, []string{"client", "--dir", dir, "--cn", "a/b"}, `--cn "a/b" cannot be a file name: give --out NAME`},
		{2, []string{"client", "--dir", dir, "--cn", "x", "--uri", "not a uri"}, "want an absolute URI"},
		{2, []string{"client", "--dir", dir, "--cn", "x", "--out", "../x"}, `--out "../x": want a file name`},
		{2, []string{"client", "--dir", dir, "--cn", "x", "--out", "ca"}, "would overwrite the CA"},
		{2, []string{"client", "--dir", dir, "--cn", "x", "--days", "0"}, "--days must be at least 1"},
		{2, []string{"init", t.TempDir(), "--days", "3000000"}, "--days 3000000 goes past the end of the year 9999"},
		{2, []string{"server", "--dir", dir, "--host", "010.1.1.1"}, `--host "010.1.1.1": not an IP address (no leading zeros)`},
		{2, []string{"server", "--dir", dir, "--host", "lock.example.com", "--host", "10.1.1"}, `--host "10.1.1": not an IP address`},
		{2, []string{"client", "--dir", dir, "--cn", "x", "--days", "4000"}, "would outlive the CA"},
		{2, []string{"client", "--dir", dir, "--cn", "x", "extra"}, `unexpected argument "extra"`},
		{2, []string{"init"}, "no directory given"},
		{2, []string{"sign"}, `unknown command "sign"`},
	}
	for _, c := range cases {
		code, stdout, stderr := command(t, nil, append([]string{"certs"}, c.args...)...)
		assert.Equal(t, c.code, code, "%v: %s", c.args, stderr)
		assert.Empty(t, stdout, "%v", c.args)
		assert.Equal(t, 1, strings.Count(stderr, "\n"), "%v: one line, got %q", c.args, stderr)
		assert.Contains(t, stderr, c.want, "%v", c.args)
	}
	_, err = os.Stat(filepath.Join(dir, "x.crt"))
	assert.True(t, os.IsNotExist(err), "a refused command writes nothing")

	// A corrupt CA key is named, not a panic.
	bad := t.TempDir()
	certs(t, "init", bad)
	require.NoError(t, os.WriteFile(filepath.Join(bad, "ca.key"), []byte("junk"), 0o600))
	code, _, stderr := command(t, nil, "certs", "client", "--dir", bad, "--cn", "x")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, filepath.Join(bad, "ca.key"))

	// --force replaces, and flags may follow the directory.
	certs(t, "init", dir, "--force", "--cn", "second CA")
	caAfter, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	require.NoError(t, err)
	assert.NotEqual(t, caBefore, caAfter)
	assert.Equal(t, "second CA", readCert(t, filepath.Join(dir, "ca.crt")).Subject.CommonName)
	assert.Equal(t, os.FileMode(0o600), mode(t, filepath.Join(dir, "ca.key")))
}

// clientFor is a Go client that trusts dir/ca.crt and presents dir/name.crt.
func clientFor(t *testing.T, addr, dir, name, serverName string) *client.Client {
	t.Helper()
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM))
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"))
	require.NoError(t, err)
	cfg := &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, ServerName: serverName}
	c, err := client.New(client.WithServers(addr), client.WithLease(10*time.Second), client.WithTLS(cfg))
	require.NoError(t, err)
	return c
}

// A whole mutual-TLS set-up made with monolock certs only: a real server
// with --tls-cert, --tls-key, --tls-client-ca and --acl; the Go client with
// a certificate the ACL allows takes its lock (by cn: and by uri:, to the
// server's IP and to its DNS name); one the ACL does not name gets 0x18;
// a server certificate (serverAuth only) is no client certificate.
func TestCertsMutualTLSWithACL(t *testing.T) {
	dir := t.TempDir()
	certs(t, "init", dir)
	certs(t, "server", "--dir", dir, "--host", "127.0.0.1", "--host", "localhost")
	certs(t, "client", "--dir", dir, "--cn", "deployer")
	certs(t, "client", "--dir", dir, "--cn", "runner-7", "--uri", "spiffe://example.org/ns/ci/sa/runner")
	certs(t, "client", "--dir", dir, "--cn", "intruder")
	aclPath := filepath.Join(dir, "acl")
	require.NoError(t, os.WriteFile(aclPath, []byte("cn:deployer deploy/*\nuri:spiffe://example.org/ns/ci/sa/runner ci/*\n"), 0o600))
	p := startServe(t, nil, "--listen", "127.0.0.1:0", "--admin", "off",
		"--tls-cert", filepath.Join(dir, "server.crt"), "--tls-key", filepath.Join(dir, "server.key"),
		"--tls-client-ca", filepath.Join(dir, "ca.crt"), "--acl", aclPath)
	p.waitLog(`msg="TLS on" mutual=true`)

	code, l := acquireCode(t, clientFor(t, p.Addr, dir, "deployer", ""), "deploy/web")
	require.Zero(t, code)
	assert.NotZero(t, l.Token())
	code, _ = acquireCode(t, clientFor(t, p.Addr, dir, "deployer", "localhost"), "deploy/db")
	assert.Zero(t, code, "verified by the DNS SAN")
	code, _ = acquireCode(t, clientFor(t, p.Addr, dir, "runner-7", ""), "ci/build")
	assert.Zero(t, code, "allowed by the URI SAN")
	code, _ = acquireCode(t, clientFor(t, p.Addr, dir, "intruder", ""), "deploy/web2")
	assert.Equal(t, protocol.ErrNotAuthorized.Code, code, "a CN the ACL does not name")
	// A refusal names every identity of the certificate, since a rule may
	// name any of them, and the server logs it (rate-limited).
	_, err := clientFor(t, p.Addr, dir, "runner-7", "").Acquire(context.Background(), "deploy/web3")
	assert.ErrorContains(t, err, "no ACL rule lets cn:runner-7, uri:spiffe://example.org/ns/ci/sa/runner take it")
	p.waitLog(`msg="claim refused by the ACL" lock=deploy/web3 identities="cn:runner-7 uri:spiffe://example.org/ns/ci/sa/runner"`)

	// The server's own certificate lacks clientAuth: the handshake fails.
	raw, err := net.DialTimeout("tcp", p.Addr, wait)
	require.NoError(t, err)
	defer raw.Close()
	require.NoError(t, raw.SetDeadline(time.Now().Add(wait)))
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key"))
	require.NoError(t, err)
	tc := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{pair}})
	acq, err := protocol.AppendAcquire(nil, "deploy/x", 60000)
	require.NoError(t, err)
	_, werr := tc.Write(acq)
	_, rerr := tc.Read(make([]byte, 16))
	assert.True(t, werr != nil || rerr != nil, "a serverAuth-only certificate is refused")
	p.waitLog(`msg="TLS handshake failed"`)
}

// The openssl lines that docs/operating.md gives as the equivalent of
// monolock certs work: run as written, their files serve mutual TLS with
// the ACL's cn: and uri: identities.
func TestOpenSSLRecipeInDocs(t *testing.T) {
	openssl := testtools.Require(t, "openssl")
	script := docsBlock(t, "# monolock certs, by hand with openssl")
	dir := t.TempDir()
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	// The recipe says "openssl"; this one is the listed tool.
	cmd.Env = append(cleanEnv(), "PATH="+filepath.Dir(openssl)+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, name := range []string{"ca", "server", "deployer"} {
		assert.Equal(t, os.FileMode(0o600), mode(t, filepath.Join(dir, name+".key")), name)
	}

	aclPath := filepath.Join(dir, "acl")
	require.NoError(t, os.WriteFile(aclPath, []byte("uri:spiffe://example.org/ns/ci/sa/deployer deploy/*\n"), 0o600))
	p := startServe(t, nil, "--listen", "127.0.0.1:0", "--admin", "off",
		"--tls-cert", filepath.Join(dir, "server.crt"), "--tls-key", filepath.Join(dir, "server.key"),
		"--tls-client-ca", filepath.Join(dir, "ca.crt"), "--acl", aclPath)
	code, _ := acquireCode(t, clientFor(t, p.Addr, dir, "deployer", ""), "deploy/web")
	assert.Zero(t, code)
	code, _ = acquireCode(t, clientFor(t, p.Addr, dir, "deployer", "localhost"), "other/x")
	assert.Equal(t, protocol.ErrNotAuthorized.Code, code)
}

// docsBlock returns the fenced code block of docs/operating.md whose first
// line is first.
func docsBlock(t *testing.T, first string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "operating.md"))
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(b), "```sh\n"+first+"\n")
	require.True(t, ok, "docs/operating.md has no sh block starting %q", first)
	block, _, ok := strings.Cut(rest, "\n```")
	require.True(t, ok, "unterminated block")
	return block
}

// What someone typed as a name is written escaped: an escape sequence in
// --cn cannot recolour the terminal or forge a line.
func TestCertsEscapesTheNameItEchoes(t *testing.T) {
	dir := t.TempDir()
	certs(t, "init", dir)
	code, stdout, stderr := command(t, nil, "certs", "client", "--dir", dir, "--cn", "ci\x1b[31mred\rforged", "--out", "ci")
	require.Equal(t, 0, code, stderr)
	assert.NotContains(t, stdout, "\x1b[", "the escape sequence reached the terminal")
	assert.NotContains(t, stdout, "\r")
	assert.Contains(t, stdout, `CN "ci\x1b[31mred\rforged"`)
	assert.Equal(t, "ci\x1b[31mred\rforged", readCert(t, filepath.Join(dir, "ci.crt")).Subject.CommonName)
}
