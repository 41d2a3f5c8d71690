//go:build unix

package runcmd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/monolock/monolock/go/client"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// retryMsg is the client's warning before each retry of an acquisition.
const retryMsg = "monolock: acquisition failed, retrying"

// retryLogEvery is how often the same retry warning is repeated while a
// server stays down: the first is written at once, later ones at most once
// per interval, with the number left out since the last one.
const retryLogEvery = 10 * time.Second

// retryFilter sits before the handler of the client's log. The client
// warns before every retry, which is right for a library but noise for a
// person: a passive server of an HA cell is moved past on every run (told
// with -v only), and a server that is down would get a line per backoff
// step. Records other than the retry warning pass unchanged.
type retryFilter struct {
	next    slog.Handler // at Info: the filter decides what is shown
	verbose bool
	st      *retryState // shared by the handlers WithAttrs derives
}

type retryState struct {
	mu   sync.Mutex
	now  func() time.Time       // time.Now; tests set a clock
	seen map[string]*retryCount // by error text: two servers failing in turn are limited each
}

type retryCount struct {
	writtenAt  time.Time
	suppressed int // not written since writtenAt
}

// maxRetryTexts bounds seen: errors whose text keeps changing start over.
const maxRetryTexts = 16

func newRetryFilter(next slog.Handler, verbose bool) *retryFilter {
	return &retryFilter{next: next, verbose: verbose, st: &retryState{now: time.Now, seen: map[string]*retryCount{}}}
}

// Enabled keeps the client's Info lines (a lost lock) out: the runner
// tells those itself.
func (f *retryFilter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (f *retryFilter) Handle(ctx context.Context, r slog.Record) error {
	if r.Message != retryMsg {
		return f.next.Handle(ctx, r)
	}
	var err error
	r.Attrs(func(a slog.Attr) bool {
		if e, ok := a.Value.Any().(error); ok && a.Key == "err" {
			err = e
		}
		return true
	})
	if passive(err) {
		if !f.verbose {
			return nil
		}
		return f.next.Handle(ctx, reworded(r, slog.LevelInfo, "monolock: trying the next server"))
	}
	suppressed, write := f.st.count(fmt.Sprint(err))
	if !write {
		return nil
	}
	if suppressed > 0 {
		r = reworded(r, r.Level, fmt.Sprintf("%s (%d more like this not shown)", retryMsg, suppressed))
		r.AddAttrs(slog.Int("suppressed", suppressed))
	}
	return f.next.Handle(ctx, r)
}

// count tells whether the warning with this error text is written now,
// and how many like it were left out since the last one written.
func (st *retryState) count(text string) (suppressed int, write bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	now := st.now()
	c := st.seen[text]
	if c != nil && now.Sub(c.writtenAt) < retryLogEvery {
		c.suppressed++
		return 0, false
	}
	if c == nil {
		if len(st.seen) >= maxRetryTexts {
			clear(st.seen)
		}
		c = &retryCount{}
		st.seen[text] = c
	}
	suppressed, c.writtenAt, c.suppressed = c.suppressed, now, 0
	return suppressed, true
}

// reworded is r at level with msg, and r's attributes.
func reworded(r slog.Record, level slog.Level, msg string) slog.Record {
	r2 := slog.NewRecord(r.Time, level, msg, r.PC)
	r.Attrs(func(a slog.Attr) bool { r2.AddAttrs(a); return true })
	return r2
}

func (f *retryFilter) WithAttrs(attrs []slog.Attr) slog.Handler {
	f2 := *f
	f2.next = f.next.WithAttrs(attrs)
	return &f2
}

func (f *retryFilter) WithGroup(name string) slog.Handler {
	f2 := *f
	f2.next = f.next.WithGroup(name)
	return &f2
}

// passive reports whether err is a passive server of an HA cell sending
// the client on: ERROR 0x03, or the ERROR 0x01 "not the active server..."
// of a server from before 0x03.
func passive(err error) bool {
	var se *client.ServerError
	if !errors.As(err, &se) {
		return false
	}
	return se.Code == protocol.ErrNotActive.Code ||
		se.Code == protocol.ErrShuttingDown.Code && strings.HasPrefix(se.Reason, "not the active server")
}
