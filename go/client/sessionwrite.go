package client

// The session's one writer: frames are queued under mu (so OPENs go out
// in the order of their ids and ONs in the order of their numbers), and
// the writer sends whatever is queued in one write. Neither the reader
// nor an application goroutine ever waits on the socket.

// enqueueLocked queues frames for the writer. Caller holds mu.
func (s *Session) enqueueLocked(frames []byte) {
	if len(frames) == 0 || s.shutWrite {
		return
	}
	s.outbox = append(s.outbox, frames...)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// shutWriteLocked asks the writer to half-close once the queue is sent:
// nothing is queued after it. Caller holds mu.
func (s *Session) shutWriteLocked() {
	if s.shutWrite {
		return
	}
	s.shutWrite = true
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// writeLoop sends the queue until the half-close, a failed write (which
// ends the session) or the reader's exit. Its deadline is the validity
// deadline, so a stuck socket is caught by the same rule as a silent
// server.
func (s *Session) writeLoop() {
	defer close(s.writerDone)
	var spare []byte
	for {
		select {
		case <-s.wake:
		case <-s.readerGone:
			return
		}
		s.mu.Lock()
		out, shut, deadline := s.outbox, s.shutWrite, s.core.ValidUntil()
		s.outbox = spare[:0]
		s.mu.Unlock()
		if len(out) > 0 {
			_ = s.conn.SetWriteDeadline(deadline)
			if _, err := s.conn.Write(out); err != nil {
				s.mu.Lock()
				a := s.core.ConnectionEnded(err)
				s.applyLocked(a)
				s.mu.Unlock()
				s.raw.Close() // the reader wakes and exits
				return
			}
		}
		spare = out
		if shut {
			cw, ok := s.conn.(interface{ CloseWrite() error })
			if !ok || cw.CloseWrite() != nil {
				s.raw.Close()
			}
			return
		}
	}
}
