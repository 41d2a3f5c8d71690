package server

import (
	"errors"
	"time"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// A session's frames are written by whoever queued them, if nobody else
// is writing: the reader at the end of its turn, the admitter after a
// reply. Otherwise the one writing writes them too, in its next turn. The
// writer goroutine (writeLoop) writes for the goroutines that must not
// wait on this session's socket: promotions by other sessions' releases,
// kicks, the watches' events. Each turn is one write of everything queued
// so far: the watches' events first, then the claims' frames and the
// ALIVEs, so that an ALIVE follows every event queued before it and
// vouches for every watch. Every write passes the leadership check a
// grant passes. Once a STREAM_END is written its claim ends and its lock
// goes on.

// writeLoop is the writer goroutine. When the session ends it writes what
// was queued before, once more, and returns (the reader then writes the
// final ERROR, if any).
func (m *streamSession) writeLoop() {
	defer close(m.writerDone)
	for last := false; !last; {
		select {
		case <-m.wake:
		case <-m.stop:
			last = true
		}
		if !m.flush() {
			return
		}
	}
}

// flush writes what is queued unless another goroutine is writing (it
// writes it then), and reports whether the session can still be written
// to.
func (m *streamSession) flush() bool {
	m.mu.Lock()
	if m.writing {
		m.mu.Unlock()
		return true
	}
	m.writing = true
	m.mu.Unlock()
	for {
		m.mu.Lock()
		out, ends := m.out, m.ends
		if len(out) == 0 && len(ends) == 0 && !m.watchesQueued() {
			m.writing = false
			m.mu.Unlock()
			return true
		}
		m.out, m.ends = m.spare[:0], nil
		m.spare = nil
		watches := make([]*stream, 0, len(m.watches))
		for st := range m.watches {
			watches = append(watches, st)
		}
		m.mu.Unlock()
		if !m.turn(out, ends, watches) {
			m.mu.Lock()
			m.writing = false
			m.mu.Unlock()
			return false
		}
		m.mu.Lock()
		m.spare = out // written: its buffer takes the next frames
		m.mu.Unlock()
	}
}

// watchesQueued reports whether a watch has frames to write, or fell
// behind. Caller holds m.mu.
func (m *streamSession) watchesQueued() bool {
	for st := range m.watches {
		if st.watch.Pending() {
			return true
		}
	}
	return false
}

// turn writes one batch: the watches' frames, then out; then it ends the
// claims whose STREAM_END was in it, and the watches that fell behind.
func (m *streamSession) turn(out []byte, ends, watches []*stream) bool {
	var batch []byte
	var behind []*stream
	for _, st := range watches {
		frames, fell := st.watch.Take()
		batch = append(batch, frames...)
		if fell {
			behind = append(behind, st)
		}
	}
	if batch == nil {
		batch = out
	} else {
		batch = append(batch, out...)
	}
	if len(batch) > 0 {
		if err := m.write(batch); err != nil {
			m.mu.Lock()
			m.ends = append(ends, m.ends...) // their STREAM_END may not be out: the reader ends them
			m.mu.Unlock()
			m.endForWrite(err)
			return false
		}
	}
	for _, st := range ends {
		m.env.claims.Release(&st.claim, st.endWhy)
		m.env.claims.Detach(&st.claim, st.place, true, time.Time{})
	}
	for _, st := range behind {
		m.endWatch(st)
	}
	return true
}

// write writes batch, after the leadership check.
func (m *streamSession) write(batch []byte) error {
	if err := m.env.claims.MayAcknowledge(); err != nil {
		return err
	}
	if err := m.conn.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
		return err
	}
	_, err := m.conn.Write(batch)
	return err
}

// endForWrite ends the session after a failed write: with the ERROR of a
// server that may no longer acknowledge, else as a reset (the client may
// still count on what it read before).
func (m *streamSession) endForWrite(err error) {
	var we *wireError
	if errors.As(err, &we) {
		m.requestEnd(endRequest{how: endRelease, final: we.Code, reason: we.Reason})
		return
	}
	m.requestEnd(endRequest{how: endReset})
}

// endWatch ends a watch whose client read too slowly: it gets what was
// queued before, then STREAM_END 0x04; the session lives on.
func (m *streamSession) endWatch(st *stream) {
	m.mu.Lock()
	live := st.state == streamLive
	if live {
		m.dropLocked(st)
		m.queueLocked(protocol.AppendStreamEnd(nil, st.id, protocol.ErrWatcherBehind.Code, protocol.ErrCodeName(protocol.ErrWatcherBehind.Code)))
	}
	m.mu.Unlock()
	if live {
		m.env.claims.Unwatch(st.watch)
		st.place.Leave()
		m.signal()
	}
}
