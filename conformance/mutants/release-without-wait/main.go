// Command release-without-wait closes the connection on release and reports
// released at once, without waiting for the server to let the lock go.
package main

import "github.com/monolock/monolock/conformance/mutants/internal/base"

func main() { base.Main("mutant-release-without-wait", base.Bugs{ReleaseWithoutWait: true}) }
