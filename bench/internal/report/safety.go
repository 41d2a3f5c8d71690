package report

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/monolock/monolock/bench/internal/safety"
)

// faultLabel is how the report names a fault.
func faultLabel(f safety.Fault, delay time.Duration) string {
	switch f {
	case safety.BlackholeUp:
		return "blackhole holder → server"
	case safety.BlackholeDown:
		return "blackhole server → holder"
	case safety.BlackholeBoth:
		return "blackhole both ways"
	case safety.DelayDown:
		if delay > 0 {
			return fmt.Sprintf("+%s delay server → holder", dur(delay))
		}
		return "delay server → holder"
	case safety.Reset:
		return "reset"
	}
	return string(f)
}

// signedMS prints a margin with its sign: "+412 ms", "−3.2 ms", "−80 µs", "−8.71 s".
// The minus is U+2212, as in the prose.
func signedMS(d time.Duration) string {
	sign := "+"
	if d < 0 {
		sign, d = "−", -d
	}
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%s%.0f µs", sign, float64(d)/1e3)
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%s%.1f ms", sign, ms(d))
	case d < time.Second:
		return fmt.Sprintf("%s%.0f ms", sign, ms(d))
	}
	return fmt.Sprintf("%s%.2f s", sign, d.Seconds())
}

func safetySystems(r *Results) []string {
	return distinct(r.Safety, func(c SafetyCell) string { return c.System })
}

func safetyFaults(r *Results) []safety.Fault {
	return present(safety.Faults, r.Safety, func(c SafetyCell) safety.Fault { return c.Fault })
}

func findSafety(r *Results, sys string, f safety.Fault) (SafetyCell, bool) {
	for _, c := range r.Safety {
		if c.System == sys && c.Fault == f {
			return c, true
		}
	}
	return SafetyCell{}, false
}

// safetyCellText is one cell of the safety table: the margins, then what
// did not happen.
func safetyCellText(c SafetyCell, window time.Duration) string {
	s := c.Summary
	if c.Err != "" {
		return "not measured: " + oneLine(c.Err)
	}
	var parts []string
	if s.Measured > 0 {
		if s.Measured == 1 {
			parts = append(parts, signedMS(s.Min))
		} else {
			parts = append(parts, fmt.Sprintf("%s / %s / %s", signedMS(s.Min), signedMS(s.Median), signedMS(s.Max)))
		}
	}
	if s.Unsafe > 0 {
		u := fmt.Sprintf("**%d/%d unsafe**", s.Unsafe, s.Runs)
		if s.UntoldBound > 0 {
			u += fmt.Sprintf(" (%d not told within %s of the grant)", s.Unsafe-countToldUnsafe(c), dur(s.UntoldBound))
		}
		parts = append(parts, u)
	} else if s.Measured > 0 || s.NoGrant > 0 {
		parts = append(parts, fmt.Sprintf("0/%d unsafe", s.Runs-s.Failed))
	}
	if s.NoGrant > 0 {
		told := s.NoGrant - noGrantUntold(c)
		parts = append(parts, fmt.Sprintf("%d not granted within %s (holder told in %d of them)", s.NoGrant, dur(window), told))
	}
	if s.Failed > 0 {
		parts = append(parts, fmt.Sprintf("%d failed: %s", s.Failed, oneLine(s.FirstErr)))
	}
	return strings.Join(parts, " · ")
}

func countToldUnsafe(c SafetyCell) int {
	n := 0
	for _, r := range c.Runs {
		if r.Unsafe() && r.HasTold {
			n++
		}
	}
	return n
}

func noGrantUntold(c SafetyCell) int {
	n := 0
	for _, r := range c.Runs {
		if r.Err == "" && !r.HasGranted && !r.HasTold {
			n++
		}
	}
	return n
}

// safetyTarget checks monolock's cells: every one at least target × lease
// and never unsafe. It returns the verdict and the text for the targets
// table.
func safetyTarget(r *Results) (string, bool, bool) {
	info := r.SafetyRun
	if info == nil {
		return "", false, false
	}
	var (
		worst     time.Duration
		worstAt   string
		first     = true
		unsafe    int
		runs      int
		misses    []string
		anyMono   bool
		threshold = time.Duration(info.Target * float64(info.Lease))
	)
	for _, c := range r.Safety {
		if !c.Monolock {
			continue
		}
		anyMono = true
		s := c.Summary
		unsafe += s.Unsafe
		runs += s.Runs
		if s.Measured > 0 && (first || s.Min < worst) {
			worst, worstAt, first = s.Min, c.System+", "+faultLabel(c.Fault, info.Delay), false
		}
		if !s.MeetsTarget(info.Lease, info.Target) {
			why := "not measured"
			switch {
			case c.Err != "":
			case s.Unsafe > 0:
				why = fmt.Sprintf("%d/%d unsafe, min %s", s.Unsafe, s.Runs, signedMS(s.Min))
			case s.Measured < s.Runs:
				why = fmt.Sprintf("%d/%d runs measured", s.Measured, s.Runs)
			default:
				why = "min " + signedMS(s.Min)
			}
			misses = append(misses, fmt.Sprintf("%s, %s (%s)", c.System, faultLabel(c.Fault, info.Delay), why))
		}
	}
	if !anyMono {
		return "", false, false
	}
	text := fmt.Sprintf("worst margin %s (%s); %d of %d runs unsafe", signedMS(worst), worstAt, unsafe, runs)
	if len(misses) > 0 {
		text += fmt.Sprintf("; %d cells below target: %s", len(misses), strings.Join(misses, "; "))
	}
	return fmt.Sprintf("| safety margin under link faults ≥ %s (+%g × lease), 0 unsafe runs, every client, every fault | %s | %s |\n",
		signedMS(threshold), info.Target, oneLineLong(text), verdict(len(misses) == 0)), len(misses) == 0, true
}

// oneLineLong is oneLine without the length cut, for lists that must stay whole.
func oneLineLong(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "\n", " "), "|", "/")
}

// writeSafety prints workload 6.
func writeSafety(b *bytes.Buffer, r *Results, chart func(key, alt string)) {
	if len(r.Safety) == 0 || r.SafetyRun == nil {
		return
	}
	info := r.SafetyRun
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	lease := info.Lease
	p("## 6. Safety margin under link faults\n\n")
	p("How much warning does each lock recipe give its holder before somebody else gets the lock, when the holder's network link fails? ")
	p("In each run a holder acquires a lock through a fault proxy in the benchmark process, a competitor queues for the same lock on a direct link, and after a random part of the holder's refresh cycle one fault hits the holder's link, and only it: ")
	p("its connections through the proxy, present and future (a client that reconnects meets the same fault). ")
	p("Two instants are read from the benchmark's one monotonic clock: the holder being told it lost the lock (its recipe's signal, listed below), and the competitor being granted it. ")
	p("**The margin is the grant minus the told time.** A negative margin means the competitor held the lock while the holder still believed it did: the run is *unsafe*, and so is a run whose holder was never told at all.\n\n")
	p("Lease, TTL and session timeout are %s for every recipe. Each cell ran %d times; the runs of one recipe run concurrently, each on its own lock, proxy and connections, and each starts at a random moment within a lease of the others, so that the phases of the clients' and servers' periodic checks differ from run to run. ", dur(lease), info.Runs)
	p("The faults: a blackhole drops every byte in its direction and holds back the FIN too, as a partition would; the delay adds %s to every byte from the server to the holder; the reset closes both of the proxy's sockets of every holder connection with a TCP RST. ", dur(info.Delay))
	p("After the fault the run watches for %s, and when the competitor is granted while the holder has not been told, for %s more after the grant, so a late tell is measured rather than cut off; an event that did not come within that is reported as such, not as a margin.\n\n", dur(info.Window), dur(info.Window))
	p("monolock's clients run as their conformance drivers (the pipe of [writing-a-client.md](writing-a-client.md)); each prints `lost` from its client's push signal, and both instants of such a run are when the driver's line reached the benchmark, so both carry the same pipe delay. ")
	p("The competitor of a driver run is a second claim in the same driver; `go (polled Err)` is the Go client in the benchmark process, its holder calling `Lock.Err()` every %s. ", dur(safety.PollEvery))
	p("The peers run in the benchmark process, their competitor on a client of its own")
	if len(info.Libraries) > 0 {
		var ls []string
		for k, v := range info.Libraries {
			ls = append(ls, k+" "+v)
		}
		slices.Sort(ls)
		p(" (%s)", strings.Join(ls, ", "))
	}
	p(".\n\n")
	writeSeparateRun(b, info.SeparateRun)
	faults := safetyFaults(r)
	p("Each cell: margin min / median / max over the runs where both events happened, then the unsafe runs. The target for monolock is a margin of at least %s (+%g × lease) and no unsafe run.\n\n", signedMS(time.Duration(info.Target*float64(lease))), info.Target)
	p("| system | holder's signal |")
	for _, f := range faults {
		p(" %s |", faultLabel(f, info.Delay))
	}
	p("\n|---|---|")
	for range faults {
		p("---|")
	}
	p("\n")
	for _, sys := range safetySystems(r) {
		sig := ""
		for _, c := range r.Safety {
			if c.System == sys {
				sig = c.Signal
				break
			}
		}
		p("| %s | %s |", sys, sig)
		for _, f := range faults {
			c, ok := findSafety(r, sys, f)
			if !ok {
				p(" not run |")
				continue
			}
			p(" %s |", safetyCellText(c, info.Window))
		}
		p("\n")
	}
	p("\n")
	chart("safety", "safety margin of every run, by recipe and fault")
	writeSafetyMechanisms(b, info)
}

// writeSafetyMechanisms explains each recipe's cells from its timers, in
// numbers for this run's lease.
func writeSafetyMechanisms(b *bytes.Buffer, info *SafetyInfo) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	L := info.Lease
	at := func(f float64) string { return round(time.Duration(f * float64(L))) }
	p("### Where each margin comes from\n\n")
	p("The figures below are what each recipe's timers predict for a %s lease; the table above is what happened.\n\n", round(L))
	p("- **monolock.** Let *t* be the send of the holder's last acknowledged message. The client decides the loss at *t* + 0.8 × lease (%s) and tells at once; it keeps the connection open until release or *t* + lease. ", at(0.8))
	p("The server frees the lock at the holder's close or a lease after the last message it *received*, which is at or after *t*. ")
	p("When the FIN gets through (blackhole server → holder, delay), the close at *t* + lease frees the lock; when it does not (blackhole holder → server, both ways), the server's lease does, and later still when a heartbeat reached the server but its ack never came back (up to lease/4, %s, more). ", at(0.25))
	p("Either way the margin is at least 0.2 × lease (%s), less the time the signal takes to reach the application (and the polling interval for the polled check). ", at(0.2))
	p("A reset tells the holder at once (its own socket reports it), but the server does not take a RST for a release: it keeps the lock until a lease after the last message it received, as for a silent holder, so the margin is most of a lease (between 0.75 × lease, %s, and a full lease, %s, less the time since that last heartbeat).\n", at(0.75), round(L))
	p("- **etcd** (`concurrency.Session` with TTL %s). The client sends a keepalive once the last reply is TTL/3 (%s) old, checking every 500 ms; it sets its deadline at the last keepalive *reply* + TTL and checks that deadline once a second; `Session.Done()` closes when a check finds it passed. ", round(L), at(1.0/3))
	p("The server expires the lease at the last keepalive it *received* + TTL and looks for expired leases every 500 ms; the revocation deletes the holder's key and the competitor's watch fires. ")
	p("When the holder's keepalives are lost (blackhole holder → server, both ways) both deadlines start from the same exchange, and the margin is the server's check delay (0–500 ms) minus the client's (0–1 s): between −1 s and +0.5 s, negative in about three runs of four. ")
	p("When only the replies are lost (blackhole server → holder, delay) the server keeps receiving keepalives until the client gives up, so it revokes most of a TTL after the holder was told. ")
	p("After a reset the client reconnects and its keepalives resume: the holder is never told and nobody else is granted.\n")
	p("- **redsync `Until()`** (expiry %s, `Extend` every lease/4 = %s). `Until()` is the start of the last successful `Extend` + expiry − 1 %% drift (%s); Redis expires the key expiry after it ran that `Extend`, so later than `Until()` by the drift and the one-way delay, and the competitor, which polls every 50–250 ms, takes it at its next try: about +20 to +270 ms when the holder's requests are lost. ", round(L), at(0.25), at(0.01))
	p("When only the replies are lost, the `Extend` that was in flight still reached Redis and pushed the expiry a further lease/4 out. After a reset go-redis reconnects and the extensions go on.\n")
	p("- **redsync `Extend()` errors.** The holder learns nothing until an `Extend` call fails, and on a silent link a call waits out go-redis's 3 s read timeout, then retries on new connections (3 retries by default), so the first failure comes about 10 s after the link went silent, while the key expired a TTL after the last `Extend` that reached Redis. With replies delayed by %s, each call times out after 3 s. Either way the competitor gets the lock seconds before the holder is told.\n", round(info.Delay))
	p("- **ZooKeeper** (session timeout %s, tickTime 250 ms). go-zookeeper pings every timeout/3 (%s) and gives a connection up after timeout × 2/3 (%s) without a read, emitting `StateDisconnected`; the server expires the session a timeout after it last heard from the client, rounded up to its next tick. ", round(L), at(1.0/3), at(2.0/3))
	p("When the holder's requests are lost that leaves about a third of the timeout (%s) plus the rounding. ", at(1.0/3))
	p("When only the replies are lost, the client reconnects a second after giving up (it waits 1 s before trying its only server again); the server hears that reconnect and renews the session, whose reply never arrives, so the session expires a timeout after the reconnect: about 1 s + %s after the holder was told. ", round(L))
	p("After a reset the client reconnects within the timeout and keeps its session: the holder is told (disconnected) but keeps the lock, and nobody else is granted.\n")
	p("- **PostgreSQL advisory locks** have no lease: the lock lives as long as the server session. A silent link (blackhole, delay) ends nothing on either side, so the competitor is never granted and the holder never told within the window (nor for the two hours of Linux's default TCP keepalive). A reset ends the session on both sides: the server releases the lock as it cleans the session up, a few ms after the holder's socket reported the reset.\n\n")
}

// round prints a duration in ms without decimals, or in s with two.
func round(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%.0f ms", ms(d))
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// safetyChart is every run's margin: one row per recipe, one colour per
// fault, runs off the scale (or with an event missing) at the edge as
// triangles.
func safetyChart(r *Results) DotChart {
	info := r.SafetyRun
	rows := safetySystems(r)
	faults := safetyFaults(r)
	clip := ms(info.Lease)
	faultLabels := make([]string, len(faults))
	for j, f := range faults {
		faultLabels[j] = faultLabel(f, info.Delay)
	}
	points := dotPoints(len(rows), len(faults), func(i, j int) []RunPoint {
		c, ok := findSafety(r, rows[i], faults[j])
		if !ok {
			return nil
		}
		var pts []RunPoint
		for _, run := range c.Runs {
			if x, onEdge, ok := chartMargin(run, clip); ok {
				pts = append(pts, RunPoint{X: x, Marked: onEdge})
			}
		}
		return pts
	})
	return DotChart{
		Title:     fmt.Sprintf("Safety margin: competitor granted − holder told (lease %s)", dur(info.Lease)),
		XLabel:    "ms (left of 0: the competitor got the lock first)",
		XMin:      -clip * 1.05,
		XMax:      clip * 1.05,
		Ticks:     stepTicks(clip / 4),
		Rows:      rows,
		Faults:    faultLabels,
		Points:    points,
		MarkLabel: "off scale, or an event that never came (see the table)",
		Lines: []Line{
			{X: 0, Color: color.Gray{Y: 80}},
			{X: info.Target * ms(info.Lease), Color: color.RGBA{R: 200, A: 255}, Dashed: true, Label: fmt.Sprintf("monolock target: +%g × lease", info.Target)},
		},
		LegendRows: len(faults), // room on top for the legend
	}
}

// chartMargin is where a run goes on the chart: its margin in ms, clamped
// to ±clip; a run with a missing event goes to the edge its margin is
// known to lie beyond. ok is false for runs that were not set up.
func chartMargin(run safety.Run, clip float64) (x float64, edge, ok bool) {
	if run.Err != "" {
		return 0, false, false
	}
	if m, measured := run.Margin(); measured {
		x = ms(m)
	} else if run.HasGranted { // never told: unsafe, by at least this much
		x = -math.Inf(1)
	} else { // never granted: safe, by at least this much
		x = math.Inf(1)
	}
	switch {
	case x > clip:
		return clip, true, true
	case x < -clip:
		return -clip, true, true
	}
	return x, false, true
}

// stepTicks marks an axis every step, labelled with a sign.
func stepTicks(step float64) func(min, max float64) []Tick {
	return func(min, max float64) []Tick {
		var ts []Tick
		for v := math.Ceil(min/step) * step; v <= max; v += step {
			label := fmt.Sprintf("%+.0f", v)
			if math.Abs(v) < step/2 {
				v, label = 0, "0"
			}
			ts = append(ts, Tick{Value: v, Label: label})
		}
		return ts
	}
}
