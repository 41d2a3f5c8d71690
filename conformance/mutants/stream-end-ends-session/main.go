// Command stream-end-ends-session takes the end of one stream for the end of its whole session.
package main

import "github.com/monolock/monolock/conformance/mutants/internal/base"

func main() { base.Main("mutant-stream-end-ends-session", base.Bugs{StreamEndEndsSession: true}) }
