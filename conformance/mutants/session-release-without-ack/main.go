// Command session-release-without-ack reports a claim on a session released as soon as its RELEASE is sent.
package main

import "github.com/monolock/monolock/conformance/mutants/internal/base"

func main() {
	base.Main("mutant-session-release-without-ack", base.Bugs{SessionReleaseWithoutAck: true})
}
