package client

import (
	"bytes"
	"errors"
	"io"
	"os"
	"time"

	"github.com/monolock/monolock/go/client/internal/session"
	"github.com/monolock/monolock/go/client/internal/streams"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// maxPending bounds the bytes of one frame not yet whole: the longest
// server frame (a STREAM of an EVENT with a value) is far below it, so
// more is a server that broke the framing.
const maxPending = 1 << 20

// read is the session's one reader: it reads frames, feeds them to the
// core and tells what the core decided; its read deadline is the core's
// next wake-up (a heartbeat, the deadline), so it is the timer too. It
// never runs application code: Acquire's goroutines are woken through
// channels. It closes the connection when it exits.
func (s *Session) read() {
	defer func() {
		s.raw.Close()
		close(s.readerGone)
		<-s.writerDone
		close(s.exited)
	}()
	var (
		buf     [4096]byte
		pending = make([]byte, 0, len(buf)) // reused: a frame not yet whole stays at its front
		heard   bool
	)
	for {
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			s.drain()
			return
		}
		wake := s.core.NextWakeup()
		if wake.IsZero() {
			s.mu.Unlock()
			return
		}
		_ = s.conn.SetReadDeadline(wake)
		s.mu.Unlock()

		n, err := s.conn.Read(buf[:])
		now := time.Now()
		if n > 0 {
			pending = append(pending, buf[:n]...)
			var a streams.Actions
			pending, heard, a = s.frames(pending, heard, now)
			if a.Close {
				return
			}
		}
		if err == nil {
			continue
		}
		s.mu.Lock()
		var a streams.Actions
		switch {
		case s.closing:
		case errors.Is(err, os.ErrDeadlineExceeded):
			a = s.core.Tick(now)
		default:
			a = s.core.ConnectionEnded(err)
		}
		s.applyLocked(a)
		s.enqueueLocked(a.Send)
		s.mu.Unlock()
		if a.Close {
			return
		}
	}
}

// frames feeds every whole frame of pending to the core and tells what it
// decided, and returns the bytes of a frame not yet whole. An ERROR ends
// the session at its type byte: its code and reason are used if the same
// read brought them, never waited for.
func (s *Session) frames(pending []byte, heard bool, now time.Time) ([]byte, bool, streams.Actions) {
	var all streams.Actions
	var r bytes.Reader
	whole := pending
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(pending) > 0 && !all.Close {
		if pending[0] == protocol.MsgError {
			code, coded, reason := errorPrefix(pending)
			a := s.core.ServerError(code, coded, reason)
			s.applyLocked(a)
			s.merge(&all, a)
			return nil, true, all
		}
		r.Reset(pending)
		f, err := protocol.ReadSessionFrame(&r)
		if err != nil {
			if (errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)) && len(pending) < maxPending {
				break // the rest comes with the next read
			}
			a := s.core.BadBytes(err, !heard, session.Quote(pending, 12))
			s.applyLocked(a)
			s.merge(&all, a)
			return nil, true, all
		}
		heard = true
		pending = pending[len(pending)-r.Len():]
		a := s.core.Frame(f, now)
		s.applyLocked(a)
		s.merge(&all, a)
	}
	// Keep the partial frame at the front, so the buffer does not creep.
	return whole[:copy(whole, pending)], heard, all
}

// merge queues what a frame asked to send and adds its close to the
// actions of a read. Caller holds s.mu.
func (s *Session) merge(all *streams.Actions, a streams.Actions) {
	s.enqueueLocked(a.Send)
	all.Close = all.Close || a.Close
}

// errorPrefix reads what arrived of an ERROR: its code once its byte is
// in, its reason as far as it came.
func errorPrefix(b []byte) (code uint8, coded bool, reason string) {
	if len(b) < 2 {
		return 0, false, ""
	}
	code, coded = b[1], true
	if len(b) < 3 {
		return code, coded, ""
	}
	rest := b[3:]
	if n := int(b[2]); len(rest) > n {
		rest = rest[:n]
	}
	return code, coded, string(rest)
}

// drain reads and drops until the server closes its side after Close's
// half-close, or the bound Close set passes.
func (s *Session) drain() {
	var buf [512]byte
	for {
		if _, err := s.conn.Read(buf[:]); err != nil {
			return
		}
	}
}
