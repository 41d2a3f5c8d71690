// Package tlsconfig builds the server's TLS configuration from PEM files and
// reloads it on request, so that a renewed certificate or client CA bundle
// takes effect for new connections without a restart.
//
// TLS 1.2 is the minimum; TLS 1.3 is negotiated whenever the client has it
// (Go prefers it). With a client CA bundle, every client must present a
// certificate that chains to it (mutual TLS).
package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/monolock/monolock/go/internal/configfile"
)

// Files names the PEM files of a TLS setup.
type Files struct {
	Cert     string // server certificate chain
	Key      string // its private key
	ClientCA string // optional: CA bundle that client certificates must chain to
}

// Reloader holds the TLS settings loaded from Files and swaps them on Reload.
type Reloader struct {
	files   Files
	current atomic.Pointer[tls.Config]
}

// Load reads the files. Errors name the file and what is wrong with it.
func Load(f Files) (*Reloader, error) {
	if f.Cert == "" || f.Key == "" {
		return nil, errors.New("a TLS certificate needs both --tls-cert and --tls-key")
	}
	r := &Reloader{files: f}
	if err := r.Reload(); err != nil {
		return nil, err
	}
	return r, nil
}

// maxPEM bounds a certificate, key or CA file: a long chain or a bundle
// of CAs is tens of kilobytes.
const maxPEM = 4 << 20

// Reload reads the files again. On error the settings in force stay.
func (r *Reloader) Reload() error {
	// Regular files of a bounded size only: a FIFO swapped in for one
	// must not hang a reload (configfile).
	certPEM, err := configfile.Read(r.files.Cert, maxPEM)
	if err != nil {
		return fmt.Errorf("TLS key pair %s, %s: %w", r.files.Cert, r.files.Key, err)
	}
	keyPEM, err := configfile.Read(r.files.Key, maxPEM)
	if err != nil {
		return fmt.Errorf("TLS key pair %s, %s: %w", r.files.Cert, r.files.Key, err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("TLS key pair %s, %s: %w", r.files.Cert, r.files.Key, err)
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
	}
	if r.files.ClientCA != "" {
		pem, err := configfile.Read(r.files.ClientCA, maxPEM)
		if err != nil {
			return fmt.Errorf("TLS client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("TLS client CA %s: no PEM certificate in it", r.files.ClientCA)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	r.current.Store(cfg)
	return nil
}

// MutualTLS reports whether clients must present a certificate.
func (r *Reloader) MutualTLS() bool { return r.files.ClientCA != "" }

// Server returns the configuration for the lock listener: every handshake
// uses the settings loaded last.
func (r *Reloader) Server() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return r.current.Load(), nil
		},
	}
}

// Admin returns the configuration for the admin listener: the same server
// certificate, no client certificate asked for (the admin API uses a bearer
// token).
func (r *Reloader) Admin() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return &r.current.Load().Certificates[0], nil
		},
	}
}
