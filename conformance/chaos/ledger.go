package chaos

import (
	"slices"
	"sync"
	"time"
)

// Window is one grant as its holder saw it: from the acquired event to the
// lost event, or to the moment the worker decided to release (it stops
// using the lock before it calls release, so that is the window's end).
type Window struct {
	Worker string
	Token  uint64
	Start  time.Duration // since the run's start
	End    time.Duration // 0 while open
	Lost   bool          // ended by the lost signal, not by a release
	Paused bool          // the worker's process was stopped during the window
}

// ledger is the fenced resource together with the record of every grant:
// one mutex orders grants and writes, so a write is judged against every
// grant the workers had been told of before it.
type ledger struct {
	mu      sync.Mutex
	windows []*Window
	highest uint64 // the fence: the highest token it has accepted

	accepted      int
	staleRejected int // rejected writes from a window its holder had paused in
	holderFenced  int // rejected writes from a window never paused: a violation
	staleAccepted int // accepted writes below a token already granted: a violation
	maxGranted    uint64
	outOfOrder    int // grants whose token is not above every earlier one
}

// grant records a grant and makes the new holder's first write, as a
// worker would before anything else.
func (l *ledger) grant(worker string, token uint64, at time.Duration) *Window {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := &Window{Worker: worker, Token: token, Start: at}
	l.windows = append(l.windows, w)
	if token <= l.maxGranted {
		l.outOfOrder++
	}
	l.writeLocked(w)
	l.maxGranted = max(l.maxGranted, token)
	return w
}

// write is a write by w's holder to the fenced resource, which accepts a
// token at least as high as every one it has accepted before.
func (l *ledger) write(w *Window) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.writeLocked(w)
}

func (l *ledger) writeLocked(w *Window) bool {
	if w.Token < l.highest {
		if w.Paused {
			l.staleRejected++
		} else {
			l.holderFenced++
		}
		return false
	}
	if w.Token < l.maxGranted {
		l.staleAccepted++
	}
	l.highest = w.Token
	l.accepted++
	return true
}

// end closes w at the given instant.
func (l *ledger) end(w *Window, at time.Duration, lost bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.End == 0 {
		w.End, w.Lost = at, lost
	}
}

// paused marks w: its holder's process was stopped while it was open.
func (l *ledger) paused(w *Window) {
	l.mu.Lock()
	w.Paused = true
	l.mu.Unlock()
}

// Overlaps are pairs of windows of different grants that were open at the
// same instant.
type Overlap struct {
	A, B Window
	For  time.Duration
}

// Gap is a time nobody held the lock.
type Gap struct{ From, To time.Duration }

// verdict closes the still open windows at end and reports the overlaps
// (split by whether a pause explains them) and the times no window was
// open, the time after the last window included.
func (l *ledger) verdict(end time.Duration) (unexplained, paused []Overlap, gaps []Gap) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ws := make([]Window, 0, len(l.windows))
	for _, w := range l.windows {
		c := *w
		if c.End == 0 {
			c.End = end
		}
		ws = append(ws, c)
	}
	slices.SortFunc(ws, func(a, b Window) int { return int(a.Start - b.Start) })
	var reach time.Duration // the latest end among the windows so far
	for i, a := range ws {
		if i > 0 && a.Start > reach {
			gaps = append(gaps, Gap{reach, a.Start})
		}
		reach = max(reach, a.End)
		for _, b := range ws[i+1:] {
			if b.Start >= a.End {
				break
			}
			o := Overlap{A: a, B: b, For: min(a.End, b.End) - b.Start}
			if a.Paused || b.Paused {
				paused = append(paused, o)
			} else {
				unexplained = append(unexplained, o)
			}
		}
	}
	if len(ws) > 0 && reach < end {
		gaps = append(gaps, Gap{reach, end})
	}
	return unexplained, paused, gaps
}
