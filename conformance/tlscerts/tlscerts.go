// Package tlscerts makes the throw-away PKI of one TLS conformance run: a
// CA, a server certificate for 127.0.0.1 and localhost, and the client
// certificates that scenarios name. Everything is generated per run into a
// temporary directory, so no private key is ever committed.
package tlscerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// Client is a client certificate that scenarios can name.
type Client struct {
	CN  string // subject common name: identity cn:<CN>
	URI string // URI SAN, or "": identity uri:<URI>
}

// Clients are the client certificates of every run, by the name a scenario
// uses in an acquire step's tls.cert. alice is known by her common name,
// bob by his URI SAN (SPIFFE style); an ACL that lists only bob's URI
// proves that URI SANs are matched.
var Clients = map[string]Client{
	"alice": {CN: "alice"},
	"bob":   {CN: "bob", URI: "spiffe://monolock.test/bob"},
}

// ServerNames are the names the server certificate covers (DNS and IP).
var ServerNames = []string{"localhost", "127.0.0.1"}

// Files are the PEM files of one run.
type Files struct {
	Dir        string
	CA         string // CA certificate
	ServerCert string
	ServerKey  string
	// ClientCert and ClientKey map a Clients name to its files.
	ClientCert map[string]string
	ClientKey  map[string]string
}

// Generate writes a fresh CA, server and client certificates into dir.
func Generate(dir string) (*Files, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "monolock conformance CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	f := &Files{Dir: dir, CA: filepath.Join(dir, "ca.pem"),
		ClientCert: map[string]string{}, ClientKey: map[string]string{}}
	if err := writePEM(f.CA, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	leaf := func(name string, tmpl *x509.Certificate) (cert, key string, err error) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return "", "", err
		}
		tmpl.SerialNumber = serial()
		tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(24*time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		tmpl.BasicConstraintsValid = true
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			return "", "", err
		}
		kder, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			return "", "", err
		}
		cert, key = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		if err := writePEM(cert, "CERTIFICATE", der); err != nil {
			return "", "", err
		}
		return cert, key, writePEM(key, "PRIVATE KEY", kder)
	}
	srv := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "monolock conformance server"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range ServerNames {
		if ip := net.ParseIP(n); ip != nil {
			srv.IPAddresses = append(srv.IPAddresses, ip)
		} else {
			srv.DNSNames = append(srv.DNSNames, n)
		}
	}
	if f.ServerCert, f.ServerKey, err = leaf("server", srv); err != nil {
		return nil, err
	}
	for name, c := range Clients {
		tmpl := &x509.Certificate{
			Subject:     pkix.Name{CommonName: c.CN},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}
		if c.URI != "" {
			u, err := url.Parse(c.URI)
			if err != nil {
				return nil, fmt.Errorf("client %s: %w", name, err)
			}
			tmpl.URIs = []*url.URL{u}
		}
		if f.ClientCert[name], f.ClientKey[name], err = leaf("client-"+name, tmpl); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n.Add(n, big.NewInt(1))
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
