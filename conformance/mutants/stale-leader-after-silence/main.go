// Command stale-leader-after-silence keeps showing the last leader an observer saw after its watch stopped being vouched for.
package main

import "github.com/monolock/monolock/conformance/mutants/internal/base"

func main() { base.Main("mutant-stale-leader-after-silence", base.Bugs{StaleLeaderAfterSilence: true}) }
