package client

import (
	"context"
	"errors"
	"time"

	"github.com/monolock/monolock/go/client/internal/streams"
	"github.com/monolock/monolock/go/client/internal/watchview"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// Watch follows name on the session, as Client.Watch does on a connection
// of its own, with one difference: it does not reconnect. Its picture is
// vouched for by its first WATCHING and then by every heartbeat the
// session gets answered, on the session's deadline; when the session
// ends, the watch ends with it (Done, and Err says why). It returns once
// the first picture is known, or with the error that ended the stream
// (the ACL, the session's end), or when ctx ends first.
func (s *Session) Watch(ctx context.Context, name string) (*Watch, error) {
	frame, err := protocol.AppendWatch(nil, protocol.Watch{LeaseMS: s.leaseMS, Name: name})
	if errors.Is(err, protocol.ErrNameTooLong) {
		return nil, nameTooLongError(name)
	}
	if err != nil {
		return nil, err
	}
	w := &Watch{name: name, done: make(chan struct{}), changed: make(chan struct{}, 1),
		core: watchview.NewCore(time.Duration(s.leaseMS) * time.Millisecond)}
	sw := &streamWatch{w: w}
	w.cancel = func() { sw.close(s) }
	if err := s.openWatch(sw, frame); err != nil {
		return nil, err
	}
	for {
		if w.State().Known {
			return w, nil
		}
		select {
		case <-w.changed:
		case <-w.done:
			if err := w.Err(); err != nil {
				return nil, err
			}
			return nil, errorf("watch %q: %w", name, ErrSessionClosed)
		case <-ctx.Done():
			w.Close()
			return nil, errorf("watch %q: %w", name, ctx.Err())
		}
	}
}

// Observe follows the leadership of name on the session, as
// Client.Observe does; the channel closes when ctx ends or the session
// does.
func (s *Session) Observe(ctx context.Context, name string) (<-chan Observation, error) {
	w, err := s.Watch(ctx, name)
	if err != nil {
		return nil, err
	}
	return observe(ctx, w), nil
}

// Campaign waits until the session is elected leader of name, with value,
// as Client.Campaign does, without retries: the term shares the
// session's fate.
func (s *Session) Campaign(ctx context.Context, name string, value []byte) (*Term, error) {
	if len(value) == 0 {
		return nil, errorf("monolock: campaign for %q: a leader's value must not be empty (followers reach the leader by it)", name)
	}
	l, err := s.Acquire(ctx, name, Value(value))
	if err != nil {
		return nil, err
	}
	return &Term{l}, nil
}

// openWatch sends the watch's OPEN, in the order of its stream id; the
// picture's first vouching runs from that send.
func (s *Session) openWatch(sw *streamWatch, watch []byte) error {
	s.mu.Lock()
	s.pollLocked()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return errorf("session: %w", err)
	}
	now := time.Now()
	id, frame, err := s.core.OpenWatch(watch, now)
	if err != nil {
		s.mu.Unlock()
		return errorf("session: %w", err)
	}
	sw.id = id
	sw.w.mu.Lock()
	sw.w.core.Sent(now)
	sw.w.mu.Unlock()
	s.streams[id] = sw
	s.enqueueLocked(frame)
	s.mu.Unlock()
	return nil
}

// streamWatch is a watch stream of a session: it feeds the Watch's core.
type streamWatch struct {
	w    *Watch
	id   uint32
	over bool // s.mu's: done is closed
}

func (sw *streamWatch) tell(ev streams.Event, s *Session) bool {
	w := sw.w
	var err error
	switch ev.Kind {
	case streams.WatchEvent:
		w.mu.Lock()
		err = w.core.Event(ev.WatchEvent, time.Now())
		w.mu.Unlock()
	case streams.WatchStarted:
		w.mu.Lock()
		err = w.core.Watching(ev.Epoch, ev.Seq)
		w.mu.Unlock()
	case streams.WatchAlive:
		// The ALIVE says the picture is whole up to where it is now.
		w.mu.Lock()
		w.core.Sent(ev.At)
		err = w.core.Watching(w.core.Epoch, w.core.Seq)
		w.mu.Unlock()
	case streams.Failed:
		sw.endLocked(causeErr(ev.Cause, s.addr, s.leaseMS))
		return true
	default: // Released
		sw.endLocked(nil)
		return true
	}
	if err != nil {
		// The server broke the watch's promise (a gap): the picture can
		// vouch for nothing; the stream is handed back.
		sw.endLocked(errorf("%w: %w", ErrProtocol, err))
		frame, _ := s.core.Release(sw.id)
		s.enqueueLocked(frame)
		return false
	}
	w.signal()
	return false
}

// endLocked ends the watch once: nothing vouched for, Done closed.
func (sw *streamWatch) endLocked(err error) {
	if sw.over {
		return
	}
	sw.over = true
	w := sw.w
	w.mu.Lock()
	w.core.Disconnected()
	w.err = err
	w.mu.Unlock()
	close(w.done)
	w.signal()
}

// close is Watch.Close: RELEASE the stream; the watch is over at once.
func (sw *streamWatch) close(s *Session) {
	s.mu.Lock()
	sw.endLocked(nil)
	frame, done := s.core.Release(sw.id)
	if done && s.streams[sw.id] == streamOwner(sw) {
		delete(s.streams, sw.id)
	}
	s.enqueueLocked(frame)
	s.mu.Unlock()
}
