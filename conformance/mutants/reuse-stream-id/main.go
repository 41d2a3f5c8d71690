// Command reuse-stream-id gives a new stream the lowest id not in use, reusing released ones.
package main

import "github.com/monolock/monolock/conformance/mutants/internal/base"

func main() { base.Main("mutant-reuse-stream-id", base.Bugs{ReuseStreamID: true}) }
