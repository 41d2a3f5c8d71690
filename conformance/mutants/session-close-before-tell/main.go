// Command session-close-before-tell closes a session at its deadline and only then reports its claims lost.
package main

import "github.com/monolock/monolock/conformance/mutants/internal/base"

func main() { base.Main("mutant-session-close-before-tell", base.Bugs{SessionCloseBeforeTell: true}) }
