package chaos

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// Breach is a time during which more claims believed they held one lock
// than its rules allow: an exclusive holder beside any other holder, or
// more shared holders than the lock's limit.
type Breach struct {
	Lock     Lock
	From, To time.Duration
	Holders  []Window // every window open during it, by start
	Most     int      // the most of them open at one instant
	// Paused: the holders whose process was never stopped were within the
	// rules throughout; only a paused holder, which cannot notice that its
	// lease ran out, made it a breach. Reported, not failed.
	Paused bool
}

// Gap is a time nobody held a lock.
type Gap struct {
	Lock     string
	From, To time.Duration
}

// holdings is what the analysis of one lock's windows found.
type holdings struct {
	breaches   []Breach
	gaps       []Gap // between windows, and after the last one
	most       int   // the most holders whose process was never paused at one instant
	withPaused int   // the most holders at one instant, paused ones included
}

// analyse sweeps the windows of lock l (each closed, as ledger.closed
// returns them, at end at the latest) in time order. Between two window
// ends or starts the set of holders is fixed; every such stretch whose
// holders the lock does not allow is a breach, joined with the one before
// it when they touch and a pause explains both or neither. Windows are
// half-open, [Start, End): a holder that let go at the instant another was
// granted did not overlap it. A window of no length was never held and is
// left out.
func analyse(l Lock, ws []Window, end time.Duration) holdings {
	type edge struct {
		at   time.Duration
		i    int
		open bool
	}
	var edges []edge
	for i, w := range ws {
		if w.End > w.Start {
			edges = append(edges, edge{w.Start, i, true}, edge{w.End, i, false})
		}
	}
	slices.SortFunc(edges, func(a, b edge) int {
		switch {
		case a.at != b.at:
			return int(a.at - b.at)
		case a.open == b.open:
			return a.i - b.i
		case a.open:
			return 1 // ends first at one instant
		default:
			return -1
		}
	})

	var h holdings
	open := map[int]bool{}
	cur := -1 // the breach the last stretch belonged to, if any
	for k := 0; k < len(edges); {
		at := edges[k].at
		for ; k < len(edges) && edges[k].at == at; k++ {
			if edges[k].open {
				open[edges[k].i] = true
			} else {
				delete(open, edges[k].i)
			}
		}
		if k == len(edges) {
			if at < end {
				h.gaps = append(h.gaps, Gap{l.Name, at, end})
			}
			break // every window is closed
		}
		next := edges[k].at
		if len(open) == 0 {
			h.gaps = append(h.gaps, Gap{l.Name, at, next})
			cur = -1
			continue
		}
		holders, live := make([]Window, 0, len(open)), make([]Window, 0, len(open))
		for i := range open {
			holders = append(holders, ws[i])
			if !ws[i].Paused {
				live = append(live, ws[i])
			}
		}
		h.most, h.withPaused = max(h.most, len(live)), max(h.withPaused, len(holders))
		if l.allows(holders) {
			cur = -1
			continue
		}
		paused := l.allows(live)
		if cur < 0 || h.breaches[cur].Paused != paused {
			h.breaches = append(h.breaches, Breach{Lock: l, From: at, Paused: paused})
			cur = len(h.breaches) - 1
		}
		b := &h.breaches[cur]
		b.To, b.Most = next, max(b.Most, len(holders))
		for _, w := range holders {
			if !slices.Contains(b.Holders, w) {
				b.Holders = append(b.Holders, w)
			}
		}
		// By start, then by worker: holders come from a map, and a report
		// must read the same every time.
		slices.SortFunc(b.Holders, func(x, y Window) int {
			return cmp.Or(cmp.Compare(x.Start, y.Start), strings.Compare(x.Worker, y.Worker), cmp.Compare(x.Token, y.Token))
		})
	}
	return h
}
