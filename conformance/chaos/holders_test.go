package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// win is a closed window of lock "x" from a to b milliseconds.
func win(worker string, shared bool, a, b int) Window {
	return Window{Worker: worker, Lock: "x", Shared: shared, Start: time.Duration(a) * ms, End: time.Duration(b) * ms}
}

func paused(w Window) Window { w.Paused = true; return w }

func workers(ws []Window) []string {
	var names []string
	for _, w := range ws {
		names = append(names, w.Worker)
	}
	return names
}

func TestAnalyseExclusiveLock(t *testing.T) {
	l := Lock{Name: "x", Exclusive: 1}
	h := analyse(l, []Window{
		win("a", false, 0, 100),
		win("b", false, 150, 400), // a gap of 50 ms before it
		win("c", false, 350, 500), // overlaps b by 50 ms: nobody was paused
		paused(win("d", false, 600, 700)),
		win("e", false, 650, 800), // overlaps d, whose holder was paused
		win("f", false, 800, 900), // starts as e ends: half-open, no overlap
		win("g", false, 850, 850), // no length: never held
	}, time.Second)

	require.Len(t, h.breaches, 2)
	b := h.breaches[0]
	assert.Equal(t, []string{"b", "c"}, workers(b.Holders))
	assert.Equal(t, [2]time.Duration{350 * ms, 400 * ms}, [2]time.Duration{b.From, b.To})
	assert.False(t, b.Paused)
	assert.Equal(t, []string{"d", "e"}, workers(h.breaches[1].Holders))
	assert.True(t, h.breaches[1].Paused)
	assert.Equal(t, 2, h.most, "b and c")
	assert.Equal(t, 2, h.withPaused)
	assert.Equal(t, []Gap{{"x", 100 * ms, 150 * ms}, {"x", 500 * ms, 600 * ms}, {"x", 900 * ms, time.Second}}, h.gaps,
		"between windows, and after the last one")
}

func TestAnalyseSemaphoreCountsHolders(t *testing.T) {
	l := Lock{Name: "x", Limit: 2}
	h := analyse(l, []Window{
		win("a", true, 0, 300),
		win("b", true, 100, 400),
		win("c", true, 200, 250), // the third permit holder: one too many
		win("d", true, 300, 500), // takes a's permit as a lets go
	}, 500*ms)
	require.Len(t, h.breaches, 1)
	b := h.breaches[0]
	assert.Equal(t, []string{"a", "b", "c"}, workers(b.Holders))
	assert.Equal(t, [2]time.Duration{200 * ms, 250 * ms}, [2]time.Duration{b.From, b.To})
	assert.Equal(t, 3, b.Most)
	assert.False(t, b.Paused)
	assert.Contains(t, b.String(), "3 holders of x at once for 50ms")
	assert.Contains(t, b.String(), "or 2 shared")
}

func TestAnalyseSemaphoreExplainsOnlyWhatPausesExplain(t *testing.T) {
	l := Lock{Name: "x", Limit: 2}
	h := analyse(l, []Window{
		paused(win("a", true, 0, 300)),
		win("b", true, 0, 300),
		win("c", true, 100, 300), // with a: three, but b and c alone are within the limit
		win("d", true, 200, 300), // b, c and d: three live holders
	}, 300*ms)
	require.Len(t, h.breaches, 2)
	assert.True(t, h.breaches[0].Paused)
	assert.Equal(t, [2]time.Duration{100 * ms, 200 * ms}, [2]time.Duration{h.breaches[0].From, h.breaches[0].To})
	assert.False(t, h.breaches[1].Paused)
	assert.Equal(t, []string{"a", "b", "c", "d"}, workers(h.breaches[1].Holders))
	assert.Equal(t, 4, h.breaches[1].Most)
	assert.Equal(t, 3, h.most, "b, c and d")
	assert.Equal(t, 4, h.withPaused)
}

func TestAnalyseSharedLockAllowsReadersButNoWriterBesideThem(t *testing.T) {
	l := Lock{Name: "x", Exclusive: sharedMixExclusive}
	h := analyse(l, []Window{
		win("r1", true, 0, 100),
		win("r2", true, 50, 150),
		win("r3", true, 60, 90), // three readers: no limit
		win("w", false, 120, 200),
		win("r4", true, 130, 140), // while the writer still overlaps r2
	}, 200*ms)
	require.Len(t, h.breaches, 1, "touching stretches of one breach are one breach")
	b := h.breaches[0]
	assert.Equal(t, []string{"r2", "w", "r4"}, workers(b.Holders))
	assert.Equal(t, [2]time.Duration{120 * ms, 150 * ms}, [2]time.Duration{b.From, b.To})
	assert.Equal(t, 3, b.Most)
	assert.Equal(t, 3, h.most)
}

func TestLockAllows(t *testing.T) {
	sem := Lock{Name: "x", Limit: 2}
	assert.True(t, sem.allows(nil))
	assert.True(t, sem.allows([]Window{win("w", false, 0, 1)}), "an exclusive holder alone")
	assert.False(t, sem.allows([]Window{win("w", false, 0, 1), win("r", true, 0, 1)}))
	assert.True(t, sem.allows([]Window{win("r", true, 0, 1), win("s", true, 0, 1)}))
	assert.False(t, sem.allows([]Window{win("r", true, 0, 1), win("s", true, 0, 1), win("t", true, 0, 1)}))
	assert.True(t, Lock{Name: "x"}.allows([]Window{win("r", true, 0, 1), win("s", true, 0, 1), win("t", true, 0, 1)}))
}

func TestParseLocks(t *testing.T) {
	ls, err := ParseLocks(DefaultLocks)
	require.NoError(t, err)
	assert.Equal(t, []Lock{{Name: "chaos/shared", Exclusive: sharedMixExclusive}, {Name: "chaos/semaphore-2", Limit: 2, Exclusive: sharedMixExclusive},
		{Name: "chaos/leader", Exclusive: 1, Election: true}}, ls)
	ls, err = ParseLocks("exclusive")
	require.NoError(t, err)
	assert.Equal(t, []Lock{{Name: "chaos/lock", Exclusive: 1}}, ls)
	for _, bad := range []string{"semaphore:0", "semaphore:x", "semaphore:65536", "mutex", "shared,shared"} {
		_, err := ParseLocks(bad)
		assert.Error(t, err, bad)
	}
}
