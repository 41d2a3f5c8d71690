package watch

import "sync"

// Watcher is one watch's frames that its connection has not written yet.
// The hub appends (under its lock); the connection's writer takes them
// all at once, so a burst of events is one write.
type Watcher struct {
	h *history // guarded by Hub.mu: the history it watches, nil when none

	mu      sync.Mutex
	pending []byte
	spare   []byte // the buffer the writer gave back, reused
	live    int    // bytes of live events in pending: what QueueLimit bounds
	behind  bool   // the queue passed QueueLimit: the writer ends the watch
	ready   chan struct{}
	// envelope starts every frame queued: a session's STREAM header
	// naming the watch's stream (protocol version 4); nil on a watch's
	// own connection.
	envelope []byte
}

// NewWatcher returns a watcher with nothing queued.
func NewWatcher() *Watcher {
	return &Watcher{ready: make(chan struct{}, 1)}
}

// NewStreamWatcher returns a watcher for a stream of a session: every
// frame is queued behind envelope, and ready is the session writer's,
// shared by all its watches (signalled, never blocked on).
func NewStreamWatcher(envelope []byte, ready chan struct{}) *Watcher {
	return &Watcher{ready: ready, envelope: envelope}
}

// Ready is signalled whenever frames were queued since the last Take.
func (w *Watcher) Ready() <-chan struct{} { return w.ready }

// push queues frame. A live event that takes the queue past QueueLimit
// marks the watcher behind instead: it is never queued with a gap.
// exempt frames (a snapshot, a resume from the history, a WATCHING) are
// not counted.
func (w *Watcher) push(frame []byte, exempt bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.behind {
		return
	}
	if !exempt {
		if w.live+len(w.envelope)+len(frame) > QueueLimit {
			w.behind = true
			w.signal()
			return
		}
		w.live += len(w.envelope) + len(frame)
	}
	w.pending = append(append(w.pending, w.envelope...), frame...)
	w.signal()
}

func (w *Watcher) signal() {
	select {
	case w.ready <- struct{}{}:
	default:
	}
}

// Pending reports whether frames are queued, or the watcher fell behind.
func (w *Watcher) Pending() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending) > 0 || w.behind
}

// Take returns every frame queued so far, in order, and whether the
// watcher fell behind after them (the connection writes them, then ends
// the watch with ERROR 0x04). The returned slice is the caller's until
// its next Take.
func (w *Watcher) Take() (frames []byte, behind bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	frames = w.pending
	w.pending, w.spare = w.spare[:0], frames // the previous Take's is done with
	w.live = 0
	return frames, w.behind
}
