// Command one-read-one-message assumes that one read returns exactly one whole frame.
package main

import "github.com/monolock/monolock/conformance/mutants/internal/base"

func main() { base.Main("mutant-one-read-one-message", base.Bugs{OneReadOneMessage: true}) }
