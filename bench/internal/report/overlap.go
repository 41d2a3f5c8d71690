package report

import (
	"bytes"
	"fmt"
	"image/color"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/monolock/monolock/bench/internal/overlap"
	"github.com/monolock/monolock/bench/internal/safety"
)

// variantLabel is how the report names a held command.
func variantLabel(v overlap.Variant) string {
	switch v {
	case overlap.Plain:
		return "plain command (dies of SIGTERM)"
	case overlap.IgnoresTerm:
		return "command that ignores SIGTERM"
	case overlap.SetsidChild:
		return "command whose setsid grandchild does the work"
	}
	return string(v)
}

// variantShort names a held command on the chart.
func variantShort(v overlap.Variant) string {
	switch v {
	case overlap.Plain:
		return "plain"
	case overlap.IgnoresTerm:
		return "ignores SIGTERM"
	case overlap.SetsidChild:
		return "setsid grandchild"
	}
	return string(v)
}

func overlapTools(r *Results) []string {
	return distinct(r.Overlap, func(c OverlapCell) string { return c.Tool })
}

func overlapVariants(r *Results) []overlap.Variant {
	return present(overlap.Variants, r.Overlap, func(c OverlapCell) overlap.Variant { return c.Variant })
}

func overlapFaults(r *Results) []safety.Fault {
	return present(safety.Faults, r.Overlap, func(c OverlapCell) safety.Fault { return c.Fault })
}

func findOverlap(r *Results, tool string, v overlap.Variant, f safety.Fault) (OverlapCell, bool) {
	for _, c := range r.Overlap {
		if c.Tool == tool && c.Variant == v && c.Fault == f {
			return c, true
		}
	}
	return OverlapCell{}, false
}

// signedFrac prints a fraction of the lease with its sign (U+2212 minus).
func signedFrac(x float64) string {
	if x < 0 {
		return fmt.Sprintf("−%.2f", -x)
	}
	return fmt.Sprintf("+%.2f", x)
}

// fromFault prints an instant counted from the fault.
func fromFault(d time.Duration) string { return signedMS(d) }

// exitsText lists the lock tool's exit statuses of A.
func exitsText(exits map[int]int) string {
	var parts []string
	for _, c := range slices.Sorted(maps.Keys(exits)) {
		if c == -1 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%d (%d)", c, exits[c]))
	}
	if n := exits[-1]; n > 0 {
		parts = append(parts, fmt.Sprintf("still running (%d)", n))
	}
	return strings.Join(parts, ", ")
}

// howAEnded says what became of A's command.
func howAEnded(s overlap.Summary) string {
	done := s.Runs - s.Failed
	var parts []string
	if stopped := done - s.Ended - s.Running; stopped > 0 {
		parts = append(parts, fmt.Sprintf("stopped (%d)", stopped))
	}
	if s.Ended > 0 {
		parts = append(parts, fmt.Sprintf("ran its whole job (%d)", s.Ended))
	}
	if s.Running > 0 {
		parts = append(parts, fmt.Sprintf("still running at the end (%d)", s.Running))
	}
	return strings.Join(parts, ", ")
}

// overlapRow is one row of a variant's table.
func overlapRow(c OverlapCell, info *OverlapInfo) string {
	label := faultLabel(c.Fault, info.Delay)
	if c.Err != "" {
		return fmt.Sprintf("| %s | %s | not measured: %s | | | | | | | |\n", c.Tool, label, oneLine(c.Err))
	}
	s := c.Summary
	runs := fmt.Sprint(s.Runs)
	if s.Failed > 0 {
		runs += fmt.Sprintf(" (%d failed: %s)", s.Failed, oneLine(s.FirstErr))
	}
	with := fmt.Sprint(s.Overlapping)
	if s.Overlapping > 0 {
		with = fmt.Sprintf("**%d**", s.Overlapping)
	}
	ov, frac, al, bf := "–", "–", "–", "–"
	if s.Measured > 0 {
		L := float64(info.Lease)
		ov = fmt.Sprintf("%s / %s / %s", signedMS(s.Min), signedMS(s.Median), signedMS(s.Max))
		frac = fmt.Sprintf("%s / %s / %s", signedFrac(float64(s.Min)/L), signedFrac(float64(s.Median)/L), signedFrac(float64(s.Max)/L))
		al, bf = fromFault(s.ALast), fromFault(s.BFirst)
	}
	if s.NoB > 0 {
		ov += fmt.Sprintf(" · B not started within %s in %d", dur(info.Window), s.NoB)
	}
	if s.Running > 0 {
		ov += fmt.Sprintf(" · %d a lower bound (A still worked at the end)", s.Running)
	}
	return fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
		c.Tool, label, runs, with, ov, frac, al, bf, howAEnded(s), exitsText(s.Exits))
}

// overlapTarget checks monolock run's cells: in every run of every cell,
// A's last append at least Gap × lease before B's first. It returns the
// row of the targets table.
func overlapTarget(r *Results) (string, bool) {
	info := r.OverlapRun
	if info == nil {
		return "", false
	}
	var (
		worst   time.Duration
		worstAt string
		first   = true
		over    int
		runs    int
		misses  []string
		anyMono bool
	)
	for _, c := range r.Overlap {
		if !c.Monolock {
			continue
		}
		anyMono = true
		s := c.Summary
		over += s.Overlapping
		runs += s.Runs
		at := variantShort(c.Variant) + ", " + faultLabel(c.Fault, info.Delay)
		if s.Measured > 0 && (first || s.Max > worst) {
			worst, worstAt, first = s.Max, at, false
		}
		if !s.MeetsTarget(info.Lease, info.Gap) {
			why := "not measured"
			switch {
			case c.Err != "":
			case s.Measured < s.Runs:
				why = fmt.Sprintf("%d/%d runs measured", s.Measured, s.Runs)
			case s.Overlapping > 0:
				why = fmt.Sprintf("%d/%d overlapping, max %s", s.Overlapping, s.Runs, signedMS(s.Max))
			default:
				why = "max " + signedMS(s.Max)
			}
			misses = append(misses, fmt.Sprintf("%s (%s)", at, why))
		}
	}
	if !anyMono {
		return "", false
	}
	gap := time.Duration(info.Gap * float64(info.Lease))
	text := fmt.Sprintf("worst A's last − B's first %s (%s); %d of %d runs overlapping", signedMS(worst), worstAt, over, runs)
	if first {
		text = "not measured"
	}
	if len(misses) > 0 {
		text += fmt.Sprintf("; %d cells short of the target: %s", len(misses), strings.Join(misses, "; "))
	}
	return fmt.Sprintf("| work overlap under link faults (`monolock run`): no overlap, the old command's last append ≥ %s (%g × lease) before the new one's first, every command and fault | %s | %s |\n",
		round(gap), info.Gap, oneLineLong(text), verdict(len(misses) == 0 && !first)), true
}

// writeOverlap prints workload 8.
func writeOverlap(b *bytes.Buffer, r *Results, chart func(key, alt string)) {
	info := r.OverlapRun
	if len(r.Overlap) == 0 || info == nil {
		return
	}
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## 8. Work overlap under link faults\n\n")
	p("Section 6 measures when a holder is *told*; this one measures when its *work* stops. ")
	p("In each run a command A holds a lock through a lock tool, `monolock run NAME -- CMD` or `etcdctl lock NAME -- CMD` (Debian's etcd-client, its session TTL the lease: `--ttl %d`), and appends a timestamp to a file every %s; the tool's connections go through section 6's fault proxy. ", int(info.Lease.Round(time.Second)/time.Second), dur(info.Every))
	p("A command B waits for the same lock through the same tool on a direct link and starts appending to a file of its own when it gets it. ")
	p("Once B is queued, after a random part of A's refresh cycle, one of section 6's five faults hits A's link, and only it. ")
	p("Every timestamp, the fault's included, is CLOCK_MONOTONIC, one clock for every process of the machine. ")
	p("**The overlap is A's last append minus B's first**: positive, both worked at once; negative, B started that long after A's last append. ")
	p("A's job is to append for %s and exit 0, unless something stops it; B's lasts %s. ", round(info.Job), round(500*time.Millisecond))
	p("The commands are `bench append` (`bench/internal/overlap`), in three kinds: a plain one, which dies of SIGTERM; one that ignores SIGTERM, so only SIGKILL stops it; and one that starts a grandchild in a session of its own (as `setsid` does) and waits for it, the grandchild doing the appending.\n\n")
	p("Lease and TTL are %s. Each cell ran %d times; the runs of one tool and command run concurrently, each on its own lock, proxy and processes, started at random moments within a lease. ", dur(info.Lease), info.Runs)
	p("After the fault the run watches until B has appended and every process of A is gone (then up to 2 s more for A's tool to exit), %s at most. ", round(info.Window))
	p("`monolock run` is the binary %s", info.Binary)
	if info.Etcdctl != "" {
		p("; `etcdctl` is %s", strings.TrimPrefix(info.Etcdctl, "etcdctl version: "))
	}
	p(".\n\n")
	writeSeparateRun(b, info.SeparateRun)
	gap := time.Duration(info.Gap * float64(info.Lease))
	p("Per cell: the runs, those with any overlap, A's last − B's first (min / median / max, in time and in leases), the medians of A's last and B's first append counted from the fault, what became of A's command, and the exit statuses of A's lock tool (*still running*: it had not exited 2 s after its command was gone). ")
	p("The target for `monolock run` is no overlap in any run, with A's last append at least %s (%g × lease) before B's first: A's last − B's first ≤ %s.\n\n", round(gap), info.Gap, signedMS(-gap))
	faults := overlapFaults(r)
	for _, v := range overlapVariants(r) {
		p("### %s\n\n", strings.ToUpper(variantLabel(v)[:1])+variantLabel(v)[1:])
		p("| tool | fault | runs | with overlap | A's last − B's first: min / median / max | ÷ lease | A's last append | B's first append | A's command | A's tool exited |\n")
		p("|---|---|---:|---:|---|---|---:|---:|---|---|\n")
		for _, tool := range overlapTools(r) {
			for _, f := range faults {
				if c, ok := findOverlap(r, tool, v, f); ok {
					p("%s", overlapRow(c, info))
				}
			}
		}
		p("\n")
	}
	chart("overlap", "A's last append minus B's first of every run, by tool, command and fault")
	writeOverlapMechanisms(b, r)
}

// writeOverlapMechanisms explains each tool's cells from its mechanism,
// in numbers for this run's lease, then what this run's monolock cells
// that missed the target show.
func writeOverlapMechanisms(b *bytes.Buffer, r *Results) {
	info := r.OverlapRun
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	L := info.Lease
	at := func(f float64) string { return round(time.Duration(f * float64(L))) }
	p("### Where each overlap comes from\n\n")
	p("**`monolock run`.** Let *t* be the send of A's last acknowledged heartbeat. On a silent link (blackhole, delay) `monolock run` decides the loss at *t* + 0.8 × lease (%s); a reset tells it at once. ", at(0.8))
	p("From the loss it sends SIGTERM to every process of the command, SIGKILL to those left, and reaps them all at least 0.05 × lease plus a kill allowance before *t* + lease (%s): the process group, and what left it, since a `setsid` grandchild is still its descendant and `monolock run`, their subreaper, inherits it when its parent dies. It keeps the lock's connection open until then and 0.05 × lease (%s) longer, never past *t* + lease. ", round(L), at(0.05))
	p("The server grants the lock to B only once A's connection has closed, or a lease after the last message it received from A, which is at or after *t*. Where the fault drops A's packets (blackhole holder → server, both ways) A's close never arrives, and B is granted at about *t* + lease; where the link still carries A's packets (blackhole server → holder, delay) the close arrives, and B is granted that 0.05 × lease after A's last process was reaped, earlier than *t* + lease. Either way A's last append precedes B's first by at least 0.05 × lease plus B's grant and start. ")
	p("On a dropped link that gap is what is left of the lease after A's work ended: for the plain command, which dies of the SIGTERM at *t* + 0.8 × lease, about 0.2 × lease (%s); for the one that ignores SIGTERM, what the SIGKILL leaves of the lease; the setsid grandchild fares as the plain command, as it keeps SIGTERM's default. ", at(0.2))
	p("After a reset the gap is most of a lease: the command is stopped at once, and the server keeps the lock until a lease after the last heartbeat it received (between 0.75 × lease, %s, and a lease after the fault).\n", at(0.75))
	writeMonolockVsT(b, r)
	writeMonolockMisses(b, r)
	if slices.ContainsFunc(r.Overlap, func(c OverlapCell) bool { return !c.Monolock && c.Err == "" }) {
		ttl := int(L.Round(time.Second) / time.Second)
		p("**`etcdctl lock`** (`--ttl %d`). `etcdctl lock NAME -- CMD` makes a `concurrency.Session` (a lease of %d s that the client keeps alive), takes the mutex NAME on it, runs CMD and waits for it to end (`exec.Cmd.Run`), and only then calls `Unlock` (etcd's `etcdctl/ctlv3/command/lock_command.go`). ", ttl, ttl)
		p("Nothing watches the session while CMD runs: when the lease is lost, CMD is neither signalled nor told, and etcdctl's handler for SIGINT and SIGTERM only cancels the lock request, which is over by then. ")
		p("So the three commands fare alike, and where B gets the lock the overlap is the rest of A's job: here a job of %s that had run a few seconds at the fault. A longer job overlaps longer; nothing bounds it.\n\n", round(info.Job))
		p("- *Blackhole holder → server, both ways.* A's keepalives no longer reach etcd, which revokes the lease a TTL after the last one it received (it looks for expired leases every 500 ms): A's key goes, B's watch fires, and B starts about a TTL (%s) after the fault, while A works on.\n", round(L))
		p("- *Blackhole server → holder, delay.* etcd keeps receiving A's keepalives until A's client gives the lease up (no reply for a TTL; the client then stops sending them), and revokes it a TTL later: B starts about two TTLs after the fault, while A works on.\n")
		p("- *Reset.* The client reconnects through the proxy and its keepalives resume, so the session survives: B waits until A's job is over and etcdctl's `Unlock` deletes A's key. No overlap; the gap is that delete, B's watch event and B's start.\n")
		p("- A's etcdctl learns of a lost session only after the job, from the `Unlock` it sends over the dead link, and then it exits 1 or goes on waiting: either way, long after B started. ")
		p("%s\n", etcdctlExits(r))
	}
	p("\n")
}

// tFigures are a monolock run cell's appends against t + lease, t being
// the send of A's last acknowledged heartbeat, over the runs where both t
// and B's first append are known.
type tFigures struct {
	n          int
	aMed, aMax time.Duration // A's last append − (t + lease)
	bMin, bMed time.Duration // B's first append − (t + lease)
	bBefore    int           // runs whose B started before t + lease
	aAfter     int           // runs whose A appended at or after t + lease
	// B's first − (t + lease), earliest and latest, over the runs whose A
	// appended at or after t + lease.
	lateBMin, lateBMax time.Duration
}

func vsT(c OverlapCell, lease time.Duration) tFigures {
	var as, bs []time.Duration
	var f tFigures
	for _, run := range c.Runs {
		if run.Err != "" || !run.HasT || !run.HasB {
			continue
		}
		a, b := run.ALast-run.T-lease, run.BFirst-run.T-lease
		as, bs = append(as, a), append(bs, b)
		if b < 0 {
			f.bBefore++
		}
		if a >= 0 {
			if f.aAfter == 0 || b < f.lateBMin {
				f.lateBMin = b
			}
			if f.aAfter == 0 || b > f.lateBMax {
				f.lateBMax = b
			}
			f.aAfter++
		}
	}
	f.n = len(as)
	if f.n == 0 {
		return f
	}
	slices.Sort(as)
	slices.Sort(bs)
	f.aMed, f.aMax = overlap.Median(as), as[len(as)-1]
	f.bMin, f.bMed = bs[0], overlap.Median(bs)
	return f
}

// writeMonolockVsT prints monolock run's cells against t + lease: the
// guarantee is A's last append before it and B's first at or after it.
func writeMonolockVsT(b *bytes.Buffer, r *Results) {
	info := r.OverlapRun
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	var rows []string
	for _, v := range overlapVariants(r) {
		for _, f := range overlapFaults(r) {
			c, ok := findOverlap(r, "monolock run", v, f)
			if !ok || c.Err != "" {
				continue
			}
			x := vsT(c, info.Lease)
			if x.n == 0 {
				continue
			}
			rows = append(rows, fmt.Sprintf("| %s | %s | %d | %s / %s | %s / %s | %d | %d |\n", variantShort(v), faultLabel(f, info.Delay), x.n,
				signedMS(x.aMed), signedMS(x.aMax), signedMS(x.bMin), signedMS(x.bMed), x.aAfter, x.bBefore))
		}
	}
	if len(rows) == 0 {
		return
	}
	p("\nBoth halves of that, per cell, with *t* read from the proxy's record of A's connection (the send of the last request whose reply reached A within 0.8 × lease): A's last append against *t* + lease, which the guarantee puts before it, and B's first, which the server puts after it unless A's close reached it first (then after A's last process was reaped, 0.05 × lease after).\n\n")
	p("| command | fault | runs | A's last − (*t* + lease): median / max | B's first − (*t* + lease): min / median | A at or after *t* + lease | B before *t* + lease |\n")
	p("|---|---|---:|---|---|---:|---:|\n")
	for _, row := range rows {
		p("%s", row)
	}
	p("\n")
}

// writeMonolockMisses says, for each monolock run cell short of the
// target, and each whose A worked past t + lease, what its figures show.
func writeMonolockMisses(b *bytes.Buffer, r *Results) {
	info := r.OverlapRun
	L := info.Lease
	var short, late []string
	for _, c := range r.Overlap {
		if !c.Monolock || c.Err != "" {
			continue
		}
		s := c.Summary
		x := vsT(c, L)
		at := fmt.Sprintf("*%s, %s*", variantShort(c.Variant), faultLabel(c.Fault, info.Delay))
		lateText := ""
		if x.n > 0 && x.aAfter > 0 {
			lateText = fmt.Sprintf("A appended at or after *t* + lease in %d of %d runs (as late as *t* + lease %s): its last process was not dead by then", x.aAfter, x.n, signedMS(x.aMax))
		}
		if s.MeetsTarget(L, info.Gap) {
			if lateText != "" {
				late = append(late, fmt.Sprintf("- %s: %s; in those runs B started later still, at *t* + lease %s to %s.\n", at, lateText, signedMS(x.lateBMin), signedMS(x.lateBMax)))
			}
			continue
		}
		var why string
		switch {
		case s.Measured == 0:
			why = "B never started within the observation"
		case s.Ended > 0 || s.Running > 0:
			why = fmt.Sprintf("A's command was not stopped in %d of %d runs (it ran its whole job, or still worked at the end), while B started at %s (median, from the fault)", s.Ended+s.Running, s.Runs-s.Failed, fromFault(s.BFirst))
		case s.Overlapping > 0:
			why = fmt.Sprintf("A was stopped, but only after B had started: A's last append at %s, B's first at %s (medians, from the fault)", fromFault(s.ALast), fromFault(s.BFirst))
		default:
			why = fmt.Sprintf("no overlap, but a gap of only %s at the narrowest", dur(-s.Max))
		}
		if lateText != "" {
			why += "; " + lateText
		}
		if x.n > 0 && x.bBefore > 0 {
			why += fmt.Sprintf("; B started before *t* + lease in %d of %d runs (as early as *t* + lease %s), so the server had freed the lock before then: A's connection was closed before *t* + lease", x.bBefore, x.n, signedMS(x.bMin))
		}
		short = append(short, "- "+at+": "+why+".\n")
	}
	if len(short) > 0 {
		fmt.Fprintf(b, "This run's binary fell short of the target in %d cells:\n\n", len(short))
		for _, l := range short {
			b.WriteString(l)
		}
		b.WriteString("\n")
	}
	if len(late) > 0 {
		if len(short) > 0 {
			fmt.Fprintf(b, "It met the target but not the guarantee in %d more:\n\n", len(late))
		} else {
			fmt.Fprintf(b, "This run's binary met the target but not the guarantee in %d cells:\n\n", len(late))
		}
		for _, l := range late {
			b.WriteString(l)
		}
		b.WriteString("\n")
	}
}

// etcdctlExits says how A's etcdctl ended in the runs where B started
// while A worked, from this run's figures.
func etcdctlExits(r *Results) string {
	exits := map[int]int{}
	said := map[int]string{}
	n := 0
	for _, c := range r.Overlap {
		if c.Monolock {
			continue
		}
		for _, run := range c.Runs {
			if o, ok := run.Overlap(); !ok || o <= 0 {
				continue
			}
			n++
			exits[run.AExit]++
			if said[run.AExit] == "" && run.ASaid != "" {
				said[run.AExit] = run.ASaid
			}
		}
	}
	if n == 0 {
		return ""
	}
	var parts []string
	for _, c := range slices.Sorted(maps.Keys(exits)) {
		what := fmt.Sprintf("exited %d in %d", c, exits[c])
		if c == -1 {
			what = fmt.Sprintf("had not exited 2 s after its command in %d", exits[c])
		}
		if s := said[c]; s != "" && c != -1 {
			what += fmt.Sprintf(" (`%s`)", strings.ReplaceAll(oneLine(s), "`", "'"))
		}
		parts = append(parts, what)
	}
	return fmt.Sprintf("In this run's %d overlapping runs etcdctl %s.", n, strings.Join(parts, ", "))
}

// symlog maps ms onto a symmetric log scale: linear within ±10 ms,
// logarithmic beyond, so that a 100 ms gap and a 10 s overlap both show.
func symlog(x float64) float64 {
	return math.Copysign(math.Log10(1+math.Abs(x)/10), x)
}

// symlogTicks labels a symlog axis at 0 and ±10 ms, ±100 ms, ±1 s, ±10 s.
func symlogTicks(min, max float64) []Tick {
	var ts []Tick
	for _, v := range []float64{-100000, -10000, -1000, -100, -10, 0, 10, 100, 1000, 10000, 100000} {
		x := symlog(v)
		if x < min || x > max {
			continue
		}
		label := "0"
		switch a := math.Abs(v); {
		case a >= 1000:
			label = fmt.Sprintf("%g s", a/1000)
		case a > 0:
			label = fmt.Sprintf("%g ms", a)
		}
		if v < 0 {
			label = "−" + label
		} else if v > 0 {
			label = "+" + label
		}
		ts = append(ts, Tick{Value: x, Label: label})
	}
	return ts
}

// overlapChartX is where a run goes on the chart (ms on the symlog
// scale) and whether it is a bound rather than a measurement: a run whose
// A still worked at the end (its overlap is at least this), or whose B
// never started (at most A's last append − the end of the observation).
func overlapChartX(run overlap.Run) (x float64, bound, ok bool) {
	if run.Err != "" {
		return 0, false, false
	}
	if o, measured := run.Overlap(); measured {
		return symlog(ms(o)), run.ARunning, true
	}
	return symlog(ms(run.ALast - run.Observed)), true, true
}

// overlapChart is every run: one row per tool and command, one colour per
// fault.
func overlapChart(r *Results) DotChart {
	info := r.OverlapRun
	type row struct {
		tool string
		v    overlap.Variant
	}
	var rows []row
	for _, tool := range overlapTools(r) {
		for _, v := range overlapVariants(r) {
			rows = append(rows, row{tool, v})
		}
	}
	faults := overlapFaults(r)
	faultLabels := make([]string, len(faults))
	for j, f := range faults {
		faultLabels[j] = faultLabel(f, info.Delay)
	}
	// The scale spans every run, a lease before B's first append and a
	// second after it.
	lo, hi := symlog(-ms(info.Lease)), symlog(1000)
	points := dotPoints(len(rows), len(faults), func(i, j int) []RunPoint {
		c, ok := findOverlap(r, rows[i].tool, rows[i].v, faults[j])
		if !ok {
			return nil
		}
		var pts []RunPoint
		for _, run := range c.Runs {
			if x, bound, ok := overlapChartX(run); ok {
				pts = append(pts, RunPoint{X: x, Marked: bound})
				lo, hi = math.Min(lo, x), math.Max(hi, x)
			}
		}
		return pts
	})
	pad := (hi - lo) * 0.04
	labels := make([]string, len(rows))
	for i, rw := range rows {
		labels[i] = rw.tool + ", " + variantShort(rw.v)
	}
	return DotChart{
		Title:        fmt.Sprintf("Work overlap: A's last append − B's first (lease %s)", dur(info.Lease)),
		TitlePadding: 8,
		XLabel:       "right of 0: A still worked after B had started (symmetric log scale)",
		XMin:         lo - pad,
		XMax:         hi + pad,
		Ticks:        symlogTicks,
		Rows:         labels,
		Faults:       faultLabels,
		Points:       points,
		MarkLabel:    "a bound, not a measurement (see the table)",
		Lines: []Line{
			{X: 0, Color: color.Gray{Y: 80}},
			{X: symlog(-info.Gap * ms(info.Lease)), Color: color.RGBA{R: 200, A: 255}, Dashed: true, Label: fmt.Sprintf("monolock run target: −%g × lease", info.Gap)},
		},
		LegendRows: len(faults) + 2,
	}
}
