// Command retry-unsupported-shared queues again when a server answers a
// shared claim with ERROR 0x10, instead of failing for good.
package main

import "github.com/monolock/monolock/conformance/mutants/internal/base"

func main() {
	base.Main("mutant-retry-unsupported-shared", base.Bugs{RetryUnsupportedShared: true})
}
