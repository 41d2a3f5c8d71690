package server

import (
	"errors"
	"time"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// writeLoop is a session of streams' writer: each time frames are queued
// it writes everything queued so far in one write: the watches' events
// first, then the claims' frames and the ALIVEs. An ALIVE thus follows
// every event queued before it, and vouches for every watch. Every write
// passes the leadership check a grant passes. Once a STREAM_END is
// written, its claim ends and its lock goes on. When the session ends it
// writes what was queued before, once more, and returns (the reader then
// writes the final ERROR, if any).
func (m *streamSession) writeLoop() {
	defer close(m.writerDone)
	var prev, batch []byte
	for last := false; !last; {
		select {
		case <-m.wake:
		case <-m.stop:
			last = true
		}
		m.mu.Lock()
		out, ends := m.out, m.ends
		m.out, m.ends = prev[:0], nil
		watches := make([]*stream, 0, len(m.watches))
		for st := range m.watches {
			watches = append(watches, st)
		}
		m.mu.Unlock()
		batch = batch[:0]
		var behind []*stream
		for _, st := range watches {
			frames, fell := st.watch.Take()
			batch = append(batch, frames...)
			if fell {
				behind = append(behind, st)
			}
		}
		batch = append(batch, out...)
		prev = out
		if len(batch) > 0 {
			if err := m.write(batch); err != nil {
				m.mu.Lock()
				m.ends = append(ends, m.ends...) // their STREAM_END may not be out: the reader ends them
				m.mu.Unlock()
				m.endForWrite(err)
				return
			}
		}
		for _, st := range ends {
			m.env.claims.Release(&st.claim, st.endWhy)
			m.env.claims.Detach(&st.claim, st.place, true, time.Time{})
		}
		for _, st := range behind {
			m.endWatch(st)
		}
	}
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
