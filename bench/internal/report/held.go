package report

import (
	"bytes"
	"fmt"

	"github.com/monolock/monolock/bench/internal/workload"
)

// The held-locks targets: 100,000 locks held on one server by sessions,
// under 1 KiB of server memory each, their heartbeats under 0.05 of a core.
const (
	heldTargetLocks = 100000
	heldTargetBytes = 1024
	heldTargetCores = 0.05
)

// heldMeasured reports whether the held workload measured anything: every
// lock it asked for was granted and the readings were taken.
func heldMeasured(h *HeldSection) bool {
	x := h.Result
	return h.Err == "" && x.Held > 0 && x.Held == x.Config.Locks() && x.RSSAfter > 0 && x.Window > 0
}

// writeHeld prints the held-locks section.
func writeHeld(b *bytes.Buffer, r *Results) {
	h := r.Held
	if h == nil {
		return
	}
	x, cfg := h.Result, h.Result.Config
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## 11. Held locks on sessions\n\n")
	p("%d sessions (protocol version 4) of the Go client, each its own connection, each holding %d locks of distinct names (lease %s) on one `monolock serve --max-sessions 0` started for this section, %d locks in all. ",
		cfg.Sessions, cfg.Claims, round(cfg.Lease), cfg.Locks())
	p("Once every lock is granted the sessions only heartbeat (the Go client's, one per session, not per lock); after %s (a heartbeat period and a second) the server's CPU time (utime + stime of `/proc/PID/stat`) is read over a quiet window of %s, and divided by it: 1.0 is one full core. ",
		round(cfg.Settle), round(cfg.Window))
	p("Memory is the growth of the server's resident set (VmRSS of `/proc/PID/status`) from before the first session to the window's end, divided by the locks held: the sessions' connections are in it, and so is whatever the Go runtime has not given back.\n\n")
	writeSeparateRun(b, h.SeparateRun)
	if h.Err != "" && x.Held == 0 {
		p("Not measured: %s\n\n", oneLine(h.Err))
		return
	}
	p("| sessions × claims | held | setup | VmRSS before | VmRSS held | VmRSS after | memory per lock | server CPU (cores) | lost | error |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	p("| %d × %d | %d | %s | %s | %s | %s | %s | %s | %d | %s |\n", cfg.Sessions, cfg.Claims, x.Held, dur(x.Setup),
		mib(x.RSSBefore), mib(x.RSSHeld), mib(x.RSSAfter), bytesOrDash(x.BytesPerLock), coresOrDash(x), x.Lost, oneLine(h.Err))
	p("\n")
}

// writeHeldTargets prints the held-locks targets: the count, the memory
// per lock and the heartbeats' CPU, each from this section's one cell.
func writeHeldTargets(b *bytes.Buffer, r *Results) {
	h := r.Held
	if h == nil {
		return
	}
	x, cfg := h.Result, h.Result.Config
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	why := ""
	if h.Err != "" {
		why = ": " + oneLine(h.Err)
	}
	p("| %s held locks on one server (sessions × claims) | %d × %d asked, %d held, %d lost%s | %s |\n", thousands(heldTargetLocks), cfg.Sessions, cfg.Claims, x.Held, x.Lost, why,
		verdict(cfg.Locks() >= heldTargetLocks && x.Held == cfg.Locks() && x.Lost == 0 && h.Err == ""))
	ok := heldMeasured(h)
	p("| server memory per held lock under 1 KiB | %s per lock at %s locks (VmRSS %s → %s) | %s |\n", bytesOrDash(x.BytesPerLock), thousands(x.Held), mib(x.RSSBefore), mib(x.RSSAfter),
		verdict(ok && x.BytesPerLock < heldTargetBytes))
	p("| heartbeats of %d sessions holding %s locks under 0.05 of a core | %s cores (%s of CPU over %s) | %s |\n", cfg.Sessions, thousands(x.Held), coresOrDash(x), dur(x.CPU), dur(x.Window),
		verdict(ok && x.CPUCores < heldTargetCores))
}

func mib(b int64) string {
	if b <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}

func bytesOrDash(v float64) string {
	if v == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f B", v)
}

func coresOrDash(x workload.HeldResult) string {
	if x.Window <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.4f", x.CPUCores)
}

// thousands prints n with a comma every three digits: 100,000.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
