// Command skip-name-validation sends lock names without checking them first.
package main

import "github.com/monolock/monolock/conformance/mutants/internal/base"

func main() { base.Main("mutant-skip-name-validation", base.Bugs{SkipNameValidation: true}) }
