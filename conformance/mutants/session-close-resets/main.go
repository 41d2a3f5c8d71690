// Command session-close-resets closes a session with a reset instead of a FIN.
package main

import "github.com/monolock/monolock/conformance/mutants/internal/base"

func main() { base.Main("mutant-session-close-resets", base.Bugs{SessionCloseResets: true}) }
