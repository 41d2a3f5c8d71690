package lograte

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fake is a Line on an injected clock whose summary timer fires only when
// the test says so.
type fake struct {
	*Line
	out   *bytes.Buffer
	clock time.Time
	timer func()        // the armed timer's function, nil if none
	due   time.Duration // what it was armed for
}

func newFake(level slog.Level) *fake {
	f := &fake{out: &bytes.Buffer{}, clock: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	log := slog.New(slog.NewTextHandler(f.out, &slog.HandlerOptions{
		Level: slog.LevelInfo,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	f.Line = New(log, level, "TLS handshake failed", 5, 10*time.Second)
	f.now = func() time.Time { return f.clock }
	f.afterFunc = func(d time.Duration, fn func()) func() bool {
		f.timer, f.due = fn, d
		return func() bool { f.timer = nil; return true }
	}
	return f
}

func (f *fake) lines() []string {
	s := strings.TrimSpace(f.out.String())
	f.out.Reset()
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func (f *fake) fire() {
	fn := f.timer
	f.timer = nil
	fn()
}

// A flood writes the first five lines of each interval and one summary
// per interval with the count of the rest, when the interval ends.
func TestFloodGivesBurstThenOneSummaryPerInterval(t *testing.T) {
	f := newFake(slog.LevelInfo)
	for i := range 5712 {
		f.Log("n", i)
		f.clock = f.clock.Add(time.Millisecond / 2) // 2000 a second, over ~2.9 s
	}
	got := f.lines()
	require.Len(t, got, 5)
	for i, l := range got {
		assert.Equal(t, fmt.Sprintf(`level=INFO msg="TLS handshake failed" n=%d`, i), l)
	}
	require.NotNil(t, f.timer, "a summary is due at the end of the interval")
	assert.Equal(t, 10*time.Second-5*time.Millisecond/2, f.due, "armed at the first suppressed line, for the interval's end")

	f.clock = f.clock.Add(7200 * time.Millisecond) // the interval is over: 10 s after the first line
	f.fire()
	assert.Equal(t, []string{`level=INFO msg="TLS handshake failed: similar lines suppressed" suppressed=5707 interval=10s`}, f.lines())

	// The next interval starts with a new burst.
	for range 7 {
		f.Log()
	}
	assert.Len(t, f.lines(), 5)
	f.Flush() // at shutdown: nothing is lost
	assert.Equal(t, []string{`level=INFO msg="TLS handshake failed: similar lines suppressed" suppressed=2 interval=10s`}, f.lines())
	assert.Nil(t, f.timer, "Flush stops the timer")
}

// A line after the interval ended writes the summary first if the timer
// has not yet (it fires late under load); the late timer then writes nothing.
func TestLateTimerDoesNotRepeatTheSummary(t *testing.T) {
	f := newFake(slog.LevelWarn)
	for range 8 {
		f.Log()
	}
	fn := f.timer
	f.clock = f.clock.Add(11 * time.Second)
	f.Log("after", true)
	assert.Equal(t, []string{
		`level=WARN msg="TLS handshake failed: similar lines suppressed" suppressed=3 interval=10s`,
		`level=WARN msg="TLS handshake failed" after=true`,
	}, f.lines()[5:])
	fn() // the first interval's timer, running late
	assert.Empty(t, f.lines())
}

// Lines below the logger's level are neither written nor counted.
func TestDisabledLevelCountsNothing(t *testing.T) {
	f := newFake(slog.LevelDebug)
	for range 20 {
		f.Log()
	}
	f.Flush()
	assert.Empty(t, f.lines())
	assert.Nil(t, f.timer)
}

// Slow, sparse lines are all written: the limit only bites on floods.
func TestSparseLinesAreAllWritten(t *testing.T) {
	f := newFake(slog.LevelInfo)
	for range 30 {
		f.Log()
		f.clock = f.clock.Add(2 * time.Second)
	}
	assert.Len(t, f.lines(), 30)
	assert.Nil(t, f.timer)
}

// With the real clock and timer, the summary arrives on its own once the
// interval ends, and concurrent callers are counted exactly.
func TestRealTimerWritesTheSummary(t *testing.T) {
	var mu sync.Mutex
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, w: &buf}, nil))
	l := New(log, slog.LevelInfo, "accept failed", 2, 20*time.Millisecond)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 25 {
				l.Log()
			}
		})
	}
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		out := buf.String()
		mu.Unlock()
		if strings.Contains(out, "similar lines suppressed") || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	l.Flush()
	mu.Lock()
	defer mu.Unlock()
	written, suppressed := 0, 0
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if i := strings.Index(line, "suppressed="); i >= 0 {
			var n int
			_, err := fmt.Sscan(line[i+len("suppressed="):], &n)
			require.NoError(t, err)
			suppressed += n
		} else {
			written++
		}
	}
	assert.Equal(t, 100, written+suppressed, "every line written or counted once:\n%s", buf.String())
	assert.Positive(t, suppressed)
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
