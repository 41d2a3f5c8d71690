// Command shared-frame-for-exclusive sends exclusive claims as version 2
// ACQUIREs, which a server of version 1 refuses.
package main

import "github.com/monolock/monolock/conformance/mutants/internal/base"

func main() {
	base.Main("mutant-shared-frame-for-exclusive", base.Bugs{SharedFrameForExclusive: true})
}
