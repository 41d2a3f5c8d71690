// Package lograte keeps one kind of log line from flooding the log when a
// peer can cause it at will (junk on the TLS port, a flood of connections):
// the first few lines of each interval are written, the rest are only
// counted and reported in one summary line when the interval ends.
package lograte

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Defaults for the server's lines: at most 5 lines of a kind, plus one
// summary, per 10 seconds.
const (
	DefaultBurst    = 5
	DefaultInterval = 10 * time.Second
)

// Line is one kind of log line (one message at one level), rate-limited.
// It is safe for concurrent use.
type Line struct {
	log   *slog.Logger
	level slog.Level
	msg   string
	burst int
	every time.Duration

	// now and afterFunc are time.Now and time.AfterFunc; tests inject a
	// clock and fire the summary timer themselves.
	now       func() time.Time
	afterFunc func(time.Duration, func()) (stop func() bool)

	mu         sync.Mutex
	start      time.Time   // the current interval began
	gen        uint64      // counts intervals, so a late timer knows its own
	seen       int         // lines in the current interval
	suppressed int         // of them, not written
	stopTimer  func() bool // stops the timer that writes the summary; nil if none
}

// New returns a Line that writes msg at level to log: the first burst
// lines of every interval, then one summary for the interval.
func New(log *slog.Logger, level slog.Level, msg string, burst int, every time.Duration) *Line {
	return &Line{log: log, level: level, msg: msg, burst: burst, every: every,
		now: time.Now, afterFunc: func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }}
}

// Default is New with DefaultBurst lines every DefaultInterval: what every
// line a peer can cause at will uses.
func Default(log *slog.Logger, level slog.Level, msg string) *Line {
	return New(log, level, msg, DefaultBurst, DefaultInterval)
}

// Log writes the line with args (slog key-value pairs), unless this
// interval already had its burst; then it only counts it.
func (l *Line) Log(args ...any) {
	if !l.log.Enabled(context.Background(), l.level) {
		return
	}
	l.mu.Lock()
	now := l.now()
	var summary int
	if now.Sub(l.start) >= l.every {
		// A new interval. Its predecessor's summary is normally written
		// by the timer; if the timer has not run yet, it is written here,
		// before this interval's lines.
		summary = l.resetLocked(now)
	}
	l.seen++
	write := l.seen <= l.burst
	if !write {
		l.suppressed++
		if l.stopTimer == nil {
			gen := l.gen
			l.stopTimer = l.afterFunc(l.start.Add(l.every).Sub(now), func() { l.flushDue(gen) })
		}
	}
	l.mu.Unlock()
	l.summary(summary)
	if write {
		l.log.Log(context.Background(), l.level, l.msg, args...)
	}
}

// Flush writes the summary of the current interval now, if lines were
// suppressed, and starts a new interval. Call it when the process stops,
// so that no count is lost.
func (l *Line) Flush() {
	l.mu.Lock()
	n := l.resetLocked(l.now())
	l.mu.Unlock()
	l.summary(n)
}

// flushDue is the timer's: it ends interval gen, which suppressed lines,
// unless a Log or Flush already ended it.
func (l *Line) flushDue(gen uint64) {
	l.mu.Lock()
	var n int
	if l.gen == gen {
		n = l.resetLocked(l.now())
	}
	l.mu.Unlock()
	l.summary(n)
}

// resetLocked starts a new interval at now and returns how many lines the
// last one suppressed. Caller holds l.mu.
func (l *Line) resetLocked(now time.Time) int {
	n := l.suppressed
	if l.stopTimer != nil {
		l.stopTimer()
		l.stopTimer = nil
	}
	l.start, l.seen, l.suppressed = now, 0, 0
	l.gen++
	return n
}

func (l *Line) summary(suppressed int) {
	if suppressed > 0 {
		l.log.Log(context.Background(), l.level, l.msg+": similar lines suppressed",
			"suppressed", suppressed, "interval", l.every)
	}
}
