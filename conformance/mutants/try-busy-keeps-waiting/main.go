// Command try-busy-keeps-waiting lets a try claim on a session wait when its stream is queued.
package main

import "github.com/monolock/monolock/conformance/mutants/internal/base"

func main() { base.Main("mutant-try-busy-keeps-waiting", base.Bugs{TryBusyKeepsWaiting: true}) }
