package tlscerts

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
)

// The generated files must make a working PKI: the server certificate
// verifies for both of its names and no other, and each client certificate
// verifies for client authentication with the identities scenarios rely on.
func TestGenerateMakesAWorkingPKI(t *testing.T) {
	f, err := Generate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("CA file holds no certificate")
	}
	srv := leaf(t, f.ServerCert, f.ServerKey)
	for _, name := range ServerNames {
		if _, err := srv.Verify(x509.VerifyOptions{Roots: pool, DNSName: name}); err != nil {
			t.Errorf("server certificate for %s: %v", name, err)
		}
	}
	if _, err := srv.Verify(x509.VerifyOptions{Roots: pool, DNSName: "wrong.monolock.test"}); err == nil {
		t.Error("server certificate verified for a name it does not hold")
	}
	for name, want := range Clients {
		c := leaf(t, f.ClientCert[name], f.ClientKey[name])
		opts := x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		if _, err := c.Verify(opts); err != nil {
			t.Errorf("client %s: %v", name, err)
		}
		if c.Subject.CommonName != want.CN {
			t.Errorf("client %s: CN %q, want %q", name, c.Subject.CommonName, want.CN)
		}
		var uris []string
		for _, u := range c.URIs {
			uris = append(uris, u.String())
		}
		if (want.URI == "") != (len(uris) == 0) || (want.URI != "" && uris[0] != want.URI) {
			t.Errorf("client %s: URI SANs %v, want %q", name, uris, want.URI)
		}
	}
}

// leaf loads a certificate and its key as a pair (so they match) and
// returns the parsed certificate.
func leaf(t *testing.T, certFile, keyFile string) *x509.Certificate {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return c
}
