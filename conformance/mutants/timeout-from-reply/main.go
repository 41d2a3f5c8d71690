// Command timeout-from-reply measures the client timeout from the last reply instead of the send of the last acknowledged request.
package main

import "github.com/monolock/monolock/conformance/mutants/internal/base"

func main() { base.Main("mutant-timeout-from-reply", base.Bugs{TimeoutFromReply: true}) }
