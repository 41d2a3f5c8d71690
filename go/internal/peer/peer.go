// Package peer names the client on the other end of a connection, for
// authorization and for the admin listing.
//
// An identity is a string with a kind prefix, so that a certificate's common
// name can never be mistaken for a DNS name or a URI:
//
//	cn:build-agent                      the subject common name
//	dns:worker-1.example.com            a DNS subject alternative name
//	uri:spiffe://example.org/ns/ci/sa/x a URI subject alternative name
//	anonymous                           no verified client certificate
package peer

import (
	"crypto/tls"
	"net"
)

// Anonymous is the identity of a client without a verified certificate:
// plain TCP, or TLS without client authentication.
const Anonymous = "anonymous"

// Identities returns every identity the verified client certificate on conn
// carries (its CN, then each DNS SAN, then each URI SAN), or [Anonymous].
// conn must be past its TLS handshake, which is the case once a frame has
// been read from it.
func Identities(conn net.Conn) []string {
	tc, ok := conn.(*tls.Conn)
	if !ok {
		return []string{Anonymous}
	}
	st := tc.ConnectionState()
	// Only a certificate that chained to the configured client CA counts:
	// VerifiedChains is empty when client certificates are not verified.
	if len(st.VerifiedChains) == 0 || len(st.PeerCertificates) == 0 {
		return []string{Anonymous}
	}
	leaf := st.PeerCertificates[0]
	ids := make([]string, 0, 1+len(leaf.DNSNames)+len(leaf.URIs))
	if cn := leaf.Subject.CommonName; cn != "" {
		ids = append(ids, "cn:"+cn)
	}
	for _, d := range leaf.DNSNames {
		ids = append(ids, "dns:"+d)
	}
	for _, u := range leaf.URIs {
		ids = append(ids, "uri:"+u.String())
	}
	if len(ids) == 0 {
		return []string{Anonymous}
	}
	return ids
}

// Primary returns the one identity shown for conn in listings and logs: a
// URI SAN (such as a SPIFFE ID) if there is one, else the CN, else the first
// DNS SAN, else Anonymous.
func Primary(conn net.Conn) string {
	ids := Identities(conn)
	for _, id := range ids {
		if len(id) > 4 && id[:4] == "uri:" {
			return id
		}
	}
	return ids[0]
}
