package server

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/monolock/monolock/go/internal/locktable"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// session is one connection: one claim on one lock. Its fields are kept few
// and fixed-size so that an idle session costs little more than its reader's
// stack: no buffered reader, no timer, no channel.
type session struct {
	srv   *Server
	id    uint64
	conn  net.Conn
	claim locktable.Claim
	rbuf  [1]byte // the reader's one-byte buffer for message types

	// done is set (under wmu) when the session starts ending: from then on
	// nothing is written but its final ERROR, and its claim is out of the
	// table. The reader also loads it without wmu to notice a kick.
	done      atomic.Bool
	lingerEnd atomic.Int64 // a final ERROR was sent: drain until then (UnixNano) before closing

	wmu  sync.Mutex
	wbuf [9]byte // guarded by wmu: WAITING or ACQUIRED, built without allocating
}

// lingerTimeout bounds how long a session that got its final ERROR is kept
// to drain what the peer still sends. Closing a socket with unread input
// makes the kernel send a reset, which can destroy the ERROR in flight;
// half-closing and draining lets the peer read it and close first.
const lingerTimeout = time.Second

func newSession(srv *Server, id uint64, conn net.Conn) *session {
	ss := &session{srv: srv, id: id, conn: conn}
	ss.claim.Session = id
	return ss
}

// wireError is the ERROR a session ends with: a canonical code plus an
// optional reason that replaces the canonical text.
type wireError struct {
	code   *protocol.Error
	reason string
}

func (e *wireError) Error() string { return e.code.Error() + ": " + e.reason }

// errFinished stops the reader of a session that someone else ended.
var errFinished = errors.New("session finished")

// run is the session's reader goroutine.
func (ss *session) run() {
	defer ss.srv.endSession(ss)
	err := ss.serve()
	var we *wireError
	var pe *protocol.Error
	switch {
	case errors.As(err, &we):
		ss.srv.log.Debug("session error", "session", ss.id, "remote", ss.conn.RemoteAddr(), "code", we.code.Code, "reason", we.reason)
		ss.finish(we.code, we.reason)
	case errors.As(err, &pe):
		ss.srv.log.Debug("session error", "session", ss.id, "remote", ss.conn.RemoteAddr(), "code", pe.Code)
		ss.finish(pe, "")
	default:
		// Peer closed, lease expired, handshake timeout, or ended by someone
		// else: close without a message.
		ss.srv.log.Debug("session closed", "session", ss.id, "remote", ss.conn.RemoteAddr(), "err", err)
		ss.finish(nil, "")
	}
	ss.drainAndClose()
}

// drainAndClose closes the connection; after a final ERROR it first reads
// and discards input until the peer closes or lingerTimeout passes.
func (ss *session) drainAndClose() {
	if end := ss.lingerEnd.Load(); end != 0 {
		// Set again: the reader may have moved the deadline since finish.
		_ = ss.conn.SetReadDeadline(time.Unix(0, end))
		var buf [256]byte
		for {
			if _, err := ss.conn.Read(buf[:]); err != nil {
				break
			}
		}
	}
	ss.conn.Close()
}

// serve reads the ACQUIRE, registers the claim and answers heartbeats until
// the session ends. It returns why it ended.
func (ss *session) serve() error {
	// The whole ACQUIRE must arrive within the handshake timeout.
	if err := ss.conn.SetReadDeadline(time.Now().Add(ss.srv.handshakeTimeout)); err != nil {
		return err
	}
	t, err := ss.readType()
	if err != nil {
		return err
	}
	switch t {
	case protocol.MsgAcquire:
	case protocol.MsgHeartbeat:
		return protocol.ErrExpectedAcquire
	default:
		return unknownType(t)
	}
	// Reads straight from the connection: the body is answered field by
	// field in the protocol's validation order, and nothing past the frame
	// is consumed.
	_, leaseMS, name, err := protocol.ReadAcquireBody(ss.conn)
	if err != nil {
		return err
	}
	lastSeen := time.Now()
	lease := time.Duration(leaseMS) * time.Millisecond
	if a := ss.srv.authorizer; a != nil {
		if err := a.Authorize(ss.conn, name); err != nil {
			return &wireError{protocol.ErrNotAuthorized, protocol.ErrCodeName(protocol.ErrNotAuthorized.Code) + ": " + err.Error()}
		}
	}
	if err := ss.register(name); err != nil {
		return err
	}
	if err := ss.reply(); err != nil {
		return err
	}
	for {
		// The lease runs from the last valid message; a partial frame does
		// not refresh it.
		if err := ss.conn.SetReadDeadline(lastSeen.Add(lease)); err != nil {
			return err
		}
		// finish, from another goroutine, sets done before it moves the
		// deadline; checking after setting ours means one of the two
		// deadlines that wake us is in force.
		if ss.done.Load() {
			return errFinished
		}
		t, err := ss.readType()
		if err != nil {
			return err
		}
		switch t {
		case protocol.MsgHeartbeat:
			lastSeen = time.Now()
			if err := ss.reply(); err != nil {
				return err
			}
		case protocol.MsgAcquire:
			return protocol.ErrDuplicateAcquire
		default:
			return unknownType(t)
		}
	}
}

// register puts the session's claim into the lock table, unless the session
// has already been ended by someone else (a kick during the handshake): the
// check and the insert happen under wmu, which finish takes to set done, so a
// claim never enters the table after finish released it.
func (ss *session) register(name string) error {
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	if ss.done.Load() {
		return errFinished
	}
	ss.claim.Name = name
	if _, err := ss.srv.table.Acquire(&ss.claim); err != nil {
		if errors.Is(err, locktable.ErrClosed) {
			return protocol.ErrShuttingDown
		}
		ss.srv.log.Error("cannot issue a fencing token", "err", err)
		return &wireError{protocol.ErrShuttingDown, "cannot issue a fencing token"}
	}
	return nil
}

func (ss *session) readType() (uint8, error) {
	for {
		n, err := ss.conn.Read(ss.rbuf[:])
		if n == 1 {
			return ss.rbuf[0], nil
		}
		if err != nil {
			return 0, err
		}
	}
}

func unknownType(t uint8) error {
	return &wireError{protocol.ErrUnknownMessage, fmt.Sprintf("unknown message type: 0x%02x", t)}
}

// reply answers an ACQUIRE or HEARTBEAT with the session's state at the
// moment of writing: ACQUIRED with its token once granted, else WAITING.
// Deciding under wmu, which a promotion also takes, keeps the order right:
// a WAITING is never written after the promotion's ACQUIRED.
func (ss *session) reply() error {
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	if ss.done.Load() {
		return errFinished
	}
	frame := ss.wbuf[:1]
	if tok := ss.claim.Token(); tok != 0 {
		frame = protocol.AppendAcquired(ss.wbuf[:0], tok)
	} else {
		frame[0] = protocol.MsgWaiting
	}
	return ss.writeLocked(frame)
}

// promote sends the unsolicited ACQUIRED of a promotion. A failed write ends
// the session; its reader then releases the lock to the next waiter.
func (ss *session) promote() {
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	if ss.done.Load() {
		return
	}
	if err := ss.writeLocked(protocol.AppendAcquired(ss.wbuf[:0], ss.claim.Token())); err != nil {
		ss.conn.Close()
	}
}

func (ss *session) writeLocked(frame []byte) error {
	if err := ss.conn.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
		return err
	}
	_, err := ss.conn.Write(frame)
	return err
}

// finish ends the session once, from whichever goroutine gets there first:
// it stops all further writes, releases the claim (promoting the next waiter
// at once unless the server is shutting down), and then either sends final
// and half-closes, leaving the reader to drain and close, or, with no final
// message, closes the connection. Either way a blocked reader wakes up.
func (ss *session) finish(final *protocol.Error, reason string) {
	ss.wmu.Lock()
	if ss.done.Load() {
		ss.wmu.Unlock()
		return
	}
	ss.done.Store(true)
	ss.wmu.Unlock()

	ss.srv.release(&ss.claim)
	if final == nil {
		ss.conn.Close()
		return
	}
	if reason == "" {
		reason = protocol.ErrCodeName(final.Code)
	}
	// No other goroutine writes once done is set.
	_ = ss.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := ss.conn.Write(protocol.AppendError(nil, final.Code, reason))
	cw, ok := ss.conn.(interface{ CloseWrite() error })
	if err != nil || !ok || cw.CloseWrite() != nil {
		ss.conn.Close()
		return
	}
	end := time.Now().Add(lingerTimeout)
	ss.lingerEnd.Store(end.UnixNano())
	_ = ss.conn.SetReadDeadline(end)
}

// release takes c out of the lock table and tells the promoted waiter, if any.
func (s *Server) release(c *locktable.Claim) {
	promoted, failed := s.table.Release(c)
	for _, f := range failed {
		if sess := s.session(f.Session); sess != nil {
			sess.finish(protocol.ErrShuttingDown, "cannot issue a fencing token")
		}
	}
	if promoted != nil {
		if sess := s.session(promoted.Session); sess != nil {
			s.log.Debug("promoted", "session", sess.id, "lock", promoted.Name, "token", promoted.Token())
			sess.promote()
		}
	}
}

func (s *Server) session(id uint64) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[id]
}

func errText(e *protocol.Error) string { return protocol.ErrCodeName(e.Code) }
