// Command session-timeout-from-reply measures a session's deadline from the last reply, not the send it answered.
package main

import "github.com/monolock/monolock/conformance/mutants/internal/base"

func main() { base.Main("mutant-session-timeout-from-reply", base.Bugs{SessionTimeoutFromReply: true}) }
