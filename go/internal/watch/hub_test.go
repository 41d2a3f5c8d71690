package watch

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// snapshotMark stands for a snapshot: one byte the tests can find.
func snapshotMark(epoch, seq uint64, resync bool) [][]byte {
	if resync {
		return [][]byte{{'R'}}
	}
	return [][]byte{{'S'}}
}

// events decodes what a watcher was queued, WATCHING frames left out.
func events(t *testing.T, frames []byte) (snapshot byte, seqs []uint64) {
	t.Helper()
	r := bytes.NewReader(frames)
	for r.Len() > 0 {
		typ, _ := r.ReadByte()
		switch typ {
		case 'S', 'R':
			snapshot = typ
		case protocol.MsgEvent:
			e, err := protocol.ReadEventBody(r)
			require.NoError(t, err)
			seqs = append(seqs, e.Seq)
		case protocol.MsgWatching:
			_, _, err := protocol.ReadWatchingBody(r)
			require.NoError(t, err)
		default:
			t.Fatalf("frame type 0x%02x", typ)
		}
	}
	return snapshot, seqs
}

func ended(hub *Hub, name string, n int) {
	for range n {
		hub.Emit(name, &protocol.Event{Kind: protocol.EventEnded, Token: 1})
	}
}

// A watcher that comes back within the history gets exactly the events it
// missed; one further behind, or of another epoch, a snapshot marked
// resync; a fresh one, a plain snapshot.
func TestResumeOrResync(t *testing.T) {
	hub := New()
	first := NewWatcher()
	hub.Subscribe(first, "n", 0, 0, snapshotMark)
	ended(hub, "n", 3)
	snap, seqs := events(t, take(first))
	assert.Equal(t, byte('S'), snap)
	assert.Equal(t, []uint64{1, 2, 3}, seqs)
	epoch := hub.names["n"].epoch
	hub.Unsubscribe(first)

	ended(hub, "n", 2) // missed
	back := NewWatcher()
	hub.Subscribe(back, "n", epoch, 3, snapshotMark)
	snap, seqs = events(t, take(back))
	assert.Zero(t, snap, "a resume within the history has no snapshot")
	assert.Equal(t, []uint64{4, 5}, seqs)

	ended(hub, "n", HistoryLen+1)
	late := NewWatcher()
	hub.Subscribe(late, "n", epoch, 5, snapshotMark)
	snap, _ = events(t, take(late))
	assert.Equal(t, byte('R'), snap, "the history no longer holds seq 6")

	stranger := NewWatcher()
	hub.Subscribe(stranger, "n", epoch+2, 1, snapshotMark)
	snap, _ = events(t, take(stranger))
	assert.Equal(t, byte('R'), snap)
}

func take(w *Watcher) []byte {
	frames, _ := w.Take()
	return bytes.Clone(frames)
}

// A watcher whose live events pass QueueLimit is marked behind and gets
// nothing more; what was queued before stays, whole.
func TestQueueLimitCutsOff(t *testing.T) {
	hub := New()
	w := NewWatcher()
	hub.Subscribe(w, "n", 0, 0, func(uint64, uint64, bool) [][]byte { return [][]byte{make([]byte, 2*QueueLimit)} })
	value := make([]byte, protocol.MaxValueLen)
	for range QueueLimit / protocol.MaxValueLen {
		hub.Emit("n", &protocol.Event{Kind: protocol.EventValue, Token: 1, Value: value})
	}
	frames, behind := w.Take()
	assert.True(t, behind)
	assert.Greater(t, len(frames), 2*QueueLimit, "the snapshot does not count against the limit")
	_, seqs := events(t, frames[2*QueueLimit:])
	for i, s := range seqs {
		require.Equal(t, uint64(i+1), s, "queued whole, in order, up to the cut")
	}
	hub.Emit("n", &protocol.Event{Kind: protocol.EventEnded, Token: 1})
	frames, _ = w.Take()
	assert.Empty(t, frames, "nothing after the cut")
}

// A history starts over under a new epoch once dropped: after Forget (a
// server that stops leading), and a minute after its last watcher left.
func TestHistoriesStartOver(t *testing.T) {
	hub := New()
	now := time.Unix(1000, 0)
	hub.now = func() time.Time { return now }
	w := NewWatcher()
	hub.Subscribe(w, "n", 0, 0, snapshotMark)
	first := hub.names["n"].epoch
	hub.Forget()
	assert.False(t, hub.Watched("n"))

	hub.Subscribe(w, "n", 0, 0, snapshotMark)
	second := hub.names["n"].epoch
	assert.NotEqual(t, first, second)
	hub.Unsubscribe(w)
	assert.True(t, hub.Watched("n"), "kept for a watcher that comes back")
	now = now.Add(2 * keepIdle)
	hub.Subscribe(NewWatcher(), "other", 0, 0, snapshotMark) // a sweep runs at a subscription
	assert.False(t, hub.Watched("n"))
}
