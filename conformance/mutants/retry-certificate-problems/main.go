// Command retry-certificate-problems retries a server whose TLS handshake
// failed on a certificate until the deadline, as clients did before the
// certificate rule, instead of failing at once.
package main

import "github.com/monolock/monolock/conformance/mutants/internal/base"

func main() {
	base.Main("mutant-retry-certificate-problems", base.Bugs{RetryCertificateProblems: true})
}
