package report

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/monolock/monolock/bench/internal/systems"
)

// beforeTargets are the targets against monolock-before, the same Go
// client's single claims against the `monolock serve` of an older
// revision in the same run: today's single claim no slower than it was.
// The factor is 0.95, not 1, to allow for the run-to-run noise of the
// shared machine the benchmark runs on.
var beforeTargets = []floorTarget{
	{systems.Monolock, 0.95, "single claims no slower than before: monolock ≥ 0.95× monolock-before (uncontended cycles/s, every worker count; 0.95 allows for this shared machine's run-to-run noise)"},
}

// writeBeforeTargets prints the before targets, each against
// monolock-before of the same run at the same worker count.
func writeBeforeTargets(b *bytes.Buffer, r *Results) {
	writeTargetsAgainst(b, r, systems.MonolockBefore, "monolock-before", beforeTargets)
}

// hasBefore reports whether the run measured monolock-before.
func hasBefore(r *Results) bool {
	return slices.ContainsFunc(r.Throughput, func(c ThroughputCell) bool { return c.System == systems.MonolockBefore })
}

// writeBeforeText says what section 1's monolock-before rows are.
func writeBeforeText(b *bytes.Buffer, r *Results) {
	if !hasBefore(r) {
		return
	}
	built := ""
	if v := r.Versions[systems.MonolockBefore]; v != "" {
		built = " (in this run: " + v + ")"
	}
	fmt.Fprintf(b, "*monolock serve, earlier revision, Go client* (monolock-before) is the same Go client's single claims as the monolock rows, in the same run, against an older `monolock serve`, built from the revision of `go/` that the benchmark's `-before` flag names%s: the monolock ÷ system column of its rows is today's single claim against that server's. ", built)
	fmt.Fprintf(b, "Its target allows monolock 0.95× of it rather than 1×, for the run-to-run noise of this shared machine.\n\n")
}
