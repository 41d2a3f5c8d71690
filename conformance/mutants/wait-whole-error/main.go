// Command wait-whole-error reads an ERROR to the end of its reason before it tells the loss or fails the attempt.
package main

import "github.com/monolock/monolock/conformance/mutants/internal/base"

func main() { base.Main("mutant-wait-whole-error", base.Bugs{WaitWholeError: true}) }
