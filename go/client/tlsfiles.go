package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// TLSFiles names the PEM files of a client's TLS configuration, as the
// monolock commands' --tls-ca, --tls-cert, --tls-key and --tls-server-name
// give them.
type TLSFiles struct {
	CA         string // CA certificates that sign the server's certificate; "": the system's roots
	Cert, Key  string // the client's certificate and key, for mutual TLS: both or neither
	ServerName string // the name the server's certificate must carry; "": the host of each address
}

// TLSFromFiles reads f into a TLS configuration for WithTLS: TLS 1.2 at
// least, the CA file's certificates as the roots (else the system's), the
// client certificate if given. An error names the file it is about.
func TLSFromFiles(f TLSFiles) (*tls.Config, error) {
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("a client certificate needs both its certificate and its key file")
	}
	var caPEM []byte
	if f.CA != "" {
		var err error
		if caPEM, err = os.ReadFile(f.CA); err != nil {
			return nil, err
		}
	}
	cfg, err := TLSFromPEM(caPEM, nil, nil, f.ServerName)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.CA, err)
	}
	if f.Cert != "" {
		pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("client certificate %s: %w", f.Cert, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// TLSFromPEM is TLSFromFiles for the files' contents: caPEM (nil: the
// system's roots), a client certificate and key (both or neither), the
// server name ("": the host of each address).
func TLSFromPEM(caPEM, certPEM, keyPEM []byte, serverName string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if len(caPEM) > 0 {
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(caPEM) {
			return nil, errors.New("no PEM certificate in it")
		}
	}
	if len(certPEM) > 0 || len(keyPEM) > 0 {
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
