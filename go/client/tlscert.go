package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"reflect"
)

// certSide says which side refused a certificate in a TLS handshake
// (spec/constants.json, client_defaults.tls_certificate_rule). A refused
// certificate is refused again on the next try, so the acquisition does
// not ask that server again, as for a server that is not monolock.
type certSide uint8

const (
	noCertProblem     certSide = iota
	serverCertRefused          // we refused the server's certificate
	clientCertRefused          // the server refused ours
)

// Alerts a server sends when it refuses the client's certificate.
var certAlerts = map[uint64]bool{
	42: true, 43: true, 44: true, 45: true, 46: true, 48: true, 49: true, // bad ... access_denied
	116: true, // certificate_required
}

// certProblem tells whether err is a TLS handshake that failed on a
// certificate, and whose. In TLS 1.3 the server's refusal of our
// certificate is an alert read after the handshake, on the first read.
func certProblem(err error) certSide {
	var (
		verify    *tls.CertificateVerificationError
		authority x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
	)
	if errors.As(err, &verify) || errors.As(err, &authority) || errors.As(err, &hostname) || errors.As(err, &invalid) {
		return serverCertRefused
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "remote error" && op.Err != nil {
		// crypto/tls reports a received alert as an unexported uint8
		// type; its value is the alert's code.
		if v := reflect.ValueOf(op.Err); v.Kind() == reflect.Uint8 && certAlerts[v.Uint()] {
			return clientCertRefused
		}
	}
	return noCertProblem
}
