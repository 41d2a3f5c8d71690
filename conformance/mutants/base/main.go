// Command base is the mutants' shared client with no bug: it must pass every scenario.
package main

import "github.com/monolock/monolock/conformance/mutants/internal/base"

func main() { base.Main("base", base.Bugs{}) }
