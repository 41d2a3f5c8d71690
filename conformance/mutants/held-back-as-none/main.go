// Command held-back-as-none shows a leader held back (its connection gone, its hold not over) as no leader.
package main

import "github.com/monolock/monolock/conformance/mutants/internal/base"

func main() { base.Main("mutant-held-back-as-none", base.Bugs{HeldBackAsNone: true}) }
