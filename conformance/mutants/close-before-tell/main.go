// Command close-before-tell closes the connection at the deadline and only then reports the loss.
package main

import "github.com/monolock/monolock/conformance/mutants/internal/base"

func main() { base.Main("mutant-close-before-tell", base.Bugs{CloseBeforeTell: true}) }
