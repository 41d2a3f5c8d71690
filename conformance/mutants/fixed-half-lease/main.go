// Command fixed-half-lease heartbeats every lease/2, ignoring the base interval and the RTT.
package main

import "github.com/monolock/monolock/conformance/mutants/internal/base"

func main() { base.Main("mutant-fixed-half-lease", base.Bugs{FixedHalfLease: true}) }
