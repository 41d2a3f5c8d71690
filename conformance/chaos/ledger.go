package chaos

import (
	"sync"
	"time"
)

// Window is one grant as its holder believed it: from the acquired event
// to the lost event, or to the moment the worker decided to release (it
// stops using the lock before it calls release, so that is the window's
// end). Both ends are instants of the harness's one clock (see
// docs/chaos.md, "What a holder believed").
type Window struct {
	Worker string
	Lock   string
	Shared bool // a shared claim (one of a semaphore's permits when the lock has a limit)
	Token  uint64
	Start  time.Duration // since the run's start
	End    time.Duration // 0 while open
	Lost   bool          // ended by the lost signal, not by a release
	Paused bool          // the worker's process was stopped during the window
}

// ledger is the fenced resources (one per lock) together with the record
// of every grant: one mutex orders grants and writes, so a write is judged
// against every grant the workers had been told of before it.
type ledger struct {
	mu      sync.Mutex
	windows []*Window
	fences  map[string]*fence

	accepted      int
	staleRejected int // rejected writes from a window its holder had paused in
	holderFenced  int // rejected writes from a window never paused: a violation
	staleAccepted int // accepted writes below a token granted to a conflicting claim: a violation
	outOfOrder    int // grants whose token is not above every earlier conflicting grant's
}

// fence is one lock's fenced resource, which its holders write to (a
// shared holder writes its own part of it, as a reader that records what
// it read would). An exclusive write must carry a token at least as high
// as every write it has accepted; a shared write one at least as high as
// every exclusive write, for shared holders hold together and their
// tokens come in any order. Counts a fence cannot bound: a semaphore's
// limit is the analyser's to check.
type fence struct {
	highest          uint64 // the highest token of an accepted write
	highestExclusive uint64 // the highest token of an accepted exclusive write
	granted          uint64 // the highest token granted on the lock
	grantedExclusive uint64 // the highest token granted to an exclusive claim
}

// bar is the lowest token the resource accepts from w; stale is the token
// below which an accepted write of w is a violation: a conflicting claim
// was granted since.
func (f *fence) bar(w *Window) (bar, stale uint64) {
	if w.Shared {
		return f.highestExclusive, f.grantedExclusive
	}
	return f.highest, f.granted
}

// grant records a grant and makes the new holder's first write, as a
// worker would before anything else.
func (l *ledger) grant(worker, lock string, shared bool, token uint64, at time.Duration) *Window {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fences == nil {
		l.fences = map[string]*fence{}
	}
	f := l.fences[lock]
	if f == nil {
		f = &fence{}
		l.fences[lock] = f
	}
	w := &Window{Worker: worker, Lock: lock, Shared: shared, Token: token, Start: at}
	l.windows = append(l.windows, w)
	// A conflicting claim was granted only after every earlier conflicting
	// holder had let go, and so after that holder's grant was recorded
	// here: its token must be higher. Shared grants made together reach
	// the harness in any order.
	if _, stale := f.bar(w); token <= stale {
		l.outOfOrder++
	}
	l.writeLocked(w)
	f.granted = max(f.granted, token)
	if !shared {
		f.grantedExclusive = max(f.grantedExclusive, token)
	}
	return w
}

// write is a write by w's holder to its lock's fenced resource.
func (l *ledger) write(w *Window) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.writeLocked(w)
}

func (l *ledger) writeLocked(w *Window) bool {
	f := l.fences[w.Lock]
	bar, stale := f.bar(w)
	if w.Token < bar {
		if w.Paused {
			l.staleRejected++
		} else {
			l.holderFenced++
		}
		return false
	}
	if w.Token < stale {
		l.staleAccepted++
	}
	f.highest = max(f.highest, w.Token)
	if !w.Shared {
		f.highestExclusive = w.Token
	}
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

// closed returns a copy of every window of lock, the still open ones
// closed at end.
func (l *ledger) closed(lock string, end time.Duration) []Window {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ws []Window
	for _, w := range l.windows {
		if w.Lock != lock {
			continue
		}
		c := *w
		if c.End == 0 {
			c.End = end
		}
		ws = append(ws, c)
	}
	return ws
}
