package client

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/monolock/monolock/go/client/internal/retry"
	"github.com/monolock/monolock/go/client/internal/streams"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// Session is one connection that carries many claims (protocol version
// 4): its locks share one lease, renewed by one heartbeat, and one fate.
// Every lock of the session is valid until the send of the session's last
// acknowledged heartbeat plus 0.8 x lease; when that passes, or the
// connection ends, or the server ends the session, every lock it holds is
// lost at once (each Lock's Done closes, then the connection closes).
//
// Use a session to hold many locks from one process, or to take many
// short ones, without a connection per lock. Use Client.Acquire when locks
// must not share a fate: one lost connection loses every lock of its
// session. A session never reconnects and never retries: after it ends,
// open another.
//
// A Session is safe for concurrent use; claims on it are pipelined.
type Session struct {
	conn    net.Conn // TLS or TCP
	raw     net.Conn // the TCP connection, closed to end the session
	addr    string
	leaseMS uint32
	cfg     *config
	log     *slog.Logger
	ready   chan struct{} // closed at SESSION_OK or at the end
	done    chan struct{} // Done: closed when the session is over
	exited  chan struct{} // closed when the reader is gone and the connection closed

	wake       chan struct{} // the writer has frames to send (buffered, 1)
	readerGone chan struct{} // closed when the reader stops: the writer stops too
	writerDone chan struct{}

	mu        sync.Mutex
	core      *streams.Core
	streams   map[uint32]streamOwner // the open streams' owners, by id
	err       error                  // why the session ended; nil while it lives
	closing   bool                   // Close was called: the reader drains until the server closes
	outbox    []byte                 // frames queued for the writer
	shutWrite bool                   // half-close once outbox is sent; nothing is queued after
}

// streamOwner is what a stream's events go to: a claim or a watch.
type streamOwner interface {
	// tell takes one event (s.mu held; it must not block) and reports
	// whether the stream is over.
	tell(ev streams.Event, s *Session) (over bool)
}

// ErrSessionClosed is Session.Err after Session.Close, and the error of an
// Acquire on a closed session or one that Close interrupted.
var ErrSessionClosed = errors.New("monolock: session closed")

// ErrSessionUnsupported means the server refused SESSION: it predates
// protocol version 4. Use Client.Acquire, or upgrade the server.
var ErrSessionUnsupported = errors.New("monolock: the server does not support sessions (protocol version 4)")

// Session opens a session on one server of the client's list, with the
// client's lease. It makes one pass over the servers, following an HA
// cell's passive server to the active one, and returns the first session
// a server accepts; ctx bounds the whole pass. When no server can be
// reached the error wraps ErrUnavailable; a server that refuses sessions
// gives ErrSessionUnsupported.
func (c *Client) Session(ctx context.Context) (*Session, error) {
	frame, err := protocol.AppendSession(nil, c.cfg.leaseMS)
	if err != nil {
		return nil, err
	}
	plan := retry.New(len(c.cfg.servers), true)
	var lastErr error
	var missed []error
	for {
		step := plan.Next()
		switch step.Kind {
		case retry.GiveUp:
			return nil, lastErr
		case retry.Sleep:
			if !sleep(ctx, step.Delay) {
				return nil, errorf("session: %w", ctx.Err())
			}
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, errorf("session: %w (last attempt: %w)", err, lastErr)
		}
		addr := c.cfg.servers[step.Server]
		s, reached, err := c.openSession(ctx, addr, frame)
		outcome := attemptOutcome(err, reached)
		switch outcome {
		case retry.Granted:
			return s, nil
		case retry.ConnectFailed, retry.NotMonolock:
			if missed == nil {
				missed = make([]error, len(c.cfg.servers))
			}
			missed[step.Server] = err
			lastErr = errorf("%w: %w", ErrUnavailable, collect(missed))
		case retry.NotActive:
			var se *ServerError
			errors.As(err, &se)
			lastErr = err
			plan.ReportNotActive(leaderIndex(c.cfg.servers, se.Reason))
			continue
		default:
			lastErr = err
		}
		if ctx.Err() != nil {
			return nil, errorf("session: %w (last attempt: %w)", ctx.Err(), lastErr)
		}
		plan.Report(outcome, 0)
	}
}

// openSession dials addr and waits for SESSION_OK. reached says whether a
// monolock server answered.
func (c *Client) openSession(ctx context.Context, addr string, frame []byte) (*Session, bool, error) {
	conn, raw, err := c.dialOne(ctx, addr)
	if err != nil {
		return nil, false, err
	}
	s := &Session{
		conn: conn, raw: raw, addr: addr, leaseMS: c.cfg.leaseMS, cfg: &c.cfg,
		log:   sessionLogger(c.cfg.logger, raw),
		ready: make(chan struct{}), done: make(chan struct{}), exited: make(chan struct{}),
		wake: make(chan struct{}, 1), readerGone: make(chan struct{}), writerDone: make(chan struct{}),
		core: streams.New(c.cfg.lease), streams: map[uint32]streamOwner{},
	}
	s.mu.Lock()
	s.enqueueLocked(s.core.Start(frame, time.Now()).Send)
	s.mu.Unlock()
	go s.writeLoop()
	go s.read()
	select {
	case <-s.ready:
	case <-ctx.Done():
		s.Close()
		return nil, true, ctx.Err()
	}
	s.mu.Lock()
	err = s.err
	s.mu.Unlock()
	if err == nil {
		return s, true, nil
	}
	// No claim was made: nothing to hold the connection open for (a
	// session that timed out would keep it until its lease's end).
	s.raw.Close()
	<-s.exited
	if c.cfg.tls != nil {
		if side := certProblem(err); side != noCertProblem {
			return nil, false, &connectError{addr: addr, err: err, tls: true, cert: side}
		}
	}
	if sessionless(err) {
		return nil, true, errorf("%w: server %s answered SESSION with %w", ErrSessionUnsupported, addr, err)
	}
	var nm *notMonolockError
	return nil, !errors.As(err, &nm) && !errors.Is(err, errClosedByServer), err
}

// sessionless reports whether err is how a server before version 4
// answers SESSION: 0x13 (the type byte is no message it knows), or 0x10
// or 0x11 (docs/protocol.md, "Version 4: sessions").
func sessionless(err error) bool {
	var se *ServerError
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code {
	case protocol.ErrUnknownMessage.Code, protocol.ErrUnsupportedVersion.Code, protocol.ErrExpectedAcquire.Code:
		return true
	}
	return false
}

func sessionLogger(logger *slog.Logger, raw net.Conn) *slog.Logger {
	if logger.Handler() == slog.DiscardHandler {
		return logger
	}
	return logger.With("session", raw.LocalAddr().String(), "server", raw.RemoteAddr().String())
}

// Done is closed when the session is over: Close, or the loss of every
// claim it held (its deadline passed, the connection ended, or the server
// ended it). Err says which.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is nil while the session lives, ErrSessionClosed after Close, and
// else why it ended: ErrClientTimeout, a *ServerError, ErrProtocol or the
// connection's error. Past the deadline it reports the loss, as Lock.Err
// does.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pollLocked()
	return s.err
}

// ValidUntil is when every claim of the session stops being valid unless
// a heartbeat is acknowledged first: the send of the last acknowledged
// one plus 0.8 x lease.
func (s *Session) ValidUntil() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.core.ValidUntil()
}

// MaxStreams is how many claims the server lets the session have open at
// once (its SESSION_OK); one more is refused with *ServerError 0x05.
func (s *Session) MaxStreams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int(s.core.MaxStreams())
}

// Close ends the session: every claim it holds or waits for is released
// (none is reported lost; an Acquire still waiting returns
// ErrSessionClosed), and the connection is closed, which makes the server
// let every claim go at once. Close returns when the server has closed its
// side too, or after at most a second (or the client timeout, if shorter).
// It is safe to call more than once and always returns nil.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		<-s.exited
		return nil
	}
	s.closing = true
	a := s.core.Close()
	s.applyLocked(a)
	s.endLocked(ErrSessionClosed)
	s.shutWriteLocked()
	s.mu.Unlock()
	// Wake the reader: it drains until the server closes (or the bound).
	_ = s.conn.SetReadDeadline(time.Now().Add(min(releaseWait, s.core.Schedule().ClientTimeout())))
	<-s.exited
	return nil
}

// pollLocked is the polled deadline check: past it, every claim of the
// session is lost here and now.
func (s *Session) pollLocked() {
	if s.err == nil {
		a, _ := s.core.Poll(time.Now())
		s.applyLocked(a)
	}
}

// endLocked records the session's end, once.
func (s *Session) endLocked(err error) {
	if s.err != nil {
		return
	}
	s.err = err
	close(s.done)
	select {
	case <-s.ready:
	default:
		close(s.ready)
	}
}

// applyLocked tells what the core decided: the session's readiness, each
// stream's news, the session's end. Nothing here blocks or runs
// application code (an Acquire's goroutine does that). Caller holds mu.
func (s *Session) applyLocked(a streams.Actions) {
	if a.Ready {
		close(s.ready)
	}
	for _, ev := range a.Events {
		o := s.streams[ev.Stream]
		if o == nil {
			continue
		}
		if o.tell(ev, s) {
			delete(s.streams, ev.Stream)
		}
	}
	if a.Ended != nil {
		err := causeErr(a.Ended, s.addr, s.leaseMS)
		if a.Ended.Kind != 0 {
			s.log.Info("monolock: session ended", "err", err)
		}
		s.endLocked(err)
	}
}
