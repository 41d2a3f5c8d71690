package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/monolock/monolock/go/internal/claims"
	"github.com/monolock/monolock/go/internal/peer"
	"github.com/monolock/monolock/go/internal/sessionlimit"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// session is one connection: one claim on one lock. Its fields are kept few
// and fixed-size so that an idle session costs little more than its reader's
// stack: no input buffer (the reader has it), no timer, no channel.
//
// Its reader is one goroutine at a time: run reads the ACQUIRE (whatever
// stack the TLS handshake, the lock table and the token store need), then
// hands the connection to a fresh goroutine that answers heartbeats. The
// heartbeat path fits in the minimum goroutine stack, and a goroutine's
// stack never shrinks back to it once the handshake has grown it, so the
// fresh one keeps an idle session at one 2 KiB stack instead of 4 KiB.
type session struct {
	env   *sessionEnv
	conn  net.Conn
	claim claims.Claim // its id is the session's; the session is its sink
	place sessionlimit.Place

	// state is 0 while the session lives. Whichever goroutine ends it sets
	// it (under wmu) to stateEnded, and to the UnixNano until which the
	// reader drains its input before closing once a final ERROR is out.
	// From the end on nothing is written but that ERROR, and the claim is
	// out of the table. The reader also loads it without wmu to notice a
	// kick.
	state atomic.Int64
	// ending is held by whichever goroutine ends the session, from the
	// moment it sets state until its work is done (final ERROR written,
	// claim dropped): the reader may find the session ended by another
	// goroutine and must not close the connection before that ERROR is
	// out. (A mutex, not a channel: 8 bytes in the session instead of a
	// 96-byte allocation.)
	ending sync.Mutex

	wmu  sync.Mutex
	wbuf [9]byte // guarded by wmu: WAITING or ACQUIRED, built without allocating

	proclaims bool // the ACQUIRE was version 3: PROCLAIM may follow

	watch *watchState // a watch of a name instead of a claim (WATCH); nil for a claim

	// streams is set when the first frame is SESSION (protocol version
	// 4): the connection carries many claims, and its end is theirs.
	streams atomic.Pointer[streamSession]
}

// stateEnded is session.state once the session is ended, unless a final
// ERROR went out (then it is the end of the drain).
const stateEnded = -1

// ended reports whether the session has started ending.
func (ss *session) ended() bool { return ss.state.Load() != 0 }

// writeTimeout bounds every frame write, so a peer that stops reading cannot
// hold up the goroutine that writes to it (a promoter, or shutdown).
const writeTimeout = 5 * time.Second

// lingerTimeout bounds how long a session that got its final ERROR is kept
// to drain what the peer still sends. Closing a socket with unread input
// makes the kernel send a reset, which can destroy the ERROR in flight;
// half-closing and draining lets the peer read it and close first.
const lingerTimeout = time.Second

// sessionEnv is what a session needs of its server: the claim layer, the
// observer and logger, the handshake timeout, and how to be forgotten
// once its reader has finished. A session never reaches the Server itself.
type sessionEnv struct {
	claims           *claims.Registry
	obs              Observer
	log              *slog.Logger
	handshakeTimeout time.Duration
	forget           func(*session)
	// For sessions of streams: the most streams one may have open, a
	// fresh claim id (unique in the server's run, shared with the
	// connections' ids), and a place in the session limits for a stream
	// ("" and a place, or why there is none).
	maxStreams int
	newID      func() uint64
	takePlace  func(net.Addr) (sessionlimit.Place, string)
	// drainUntil is when a shutdown stops waiting for holders to close
	// (UnixNano), 0 until the server shuts down.
	drainUntil atomic.Int64
}

func newSession(env *sessionEnv, id uint64, conn net.Conn, place sessionlimit.Place) *session {
	ss := &session{env: env, conn: conn, place: place}
	ss.claim.Init(id, ss)
	return ss
}

// id is the session's number, unique in this server's run.
func (ss *session) id() uint64 { return ss.claim.ID() }

// inputSize is the reader's input buffer: one read of it takes a whole
// ACQUIRE with a name of up to inputSize-8 bytes, where reading field by
// field straight from the connection would cost four system calls (type,
// version, header, name). Longer names only take more reads. A run of up to
// inputSize heartbeats that arrives together is answered once.
const inputSize = 64

// input is a small read buffer over the connection, used by the session's
// reader only. Bytes read past a frame stay here for the next readByte, so
// buffering changes how many system calls the reader makes, never what it
// sees or in which order it validates.
type input struct {
	buf  [inputSize]byte
	r, w uint8 // buf[r:w] is read but not yet consumed
}

// handshakeInput is the reader's input while it reads the ACQUIRE (whose
// body is read through an io.Reader, so it is on the heap), and what the
// handshake hands to the heartbeat reader: what is left in the input, and
// the lease. A TCP session's is recycled as soon as the heartbeat reader
// has taken that over (see source).
type handshakeInput struct {
	conn     net.Conn
	in       input
	lastSeen time.Time // the ACQUIRE's arrival: the lease runs from it
	lease    time.Duration
}

// handshakeInputs recycles the handshakes' inputs: sessions start at the
// rate clients connect, and one per session would be garbage that the
// heap grows by between collections.
var handshakeInputs = sync.Pool{New: func() any { return new(handshakeInput) }}

// Read serves buffered bytes first; with none left it reads from the
// connection, into the buffer unless p is as large.
func (h *handshakeInput) Read(p []byte) (int, error) {
	in := &h.in
	if in.r == in.w {
		if len(p) >= len(in.buf) {
			return h.conn.Read(p)
		}
		n, err := h.conn.Read(in.buf[:])
		in.r, in.w = 0, uint8(n)
		if n == 0 {
			return 0, err
		}
		// Any error comes back from the next read, which finds the buffer
		// empty and asks the connection again.
	}
	n := copy(p, in.buf[in.r:in.w])
	in.r += uint8(n)
	return n, nil
}

// readByte returns the next byte of the stream. The handshake's buffer is
// its own spill: the connection reads into it in place.
func (h *handshakeInput) readByte() (byte, error) {
	return h.in.readByte(&source{conn: h.conn, spill: &h.in.buf})
}

// source is where the heartbeat reader's bytes come from. It keeps its
// input on its own stack, which is there anyway, rather than 64 bytes more
// per session on the heap: a *net.TCPConn reads straight into it without
// the buffer escaping, where a read through the net.Conn interface would
// move it to the heap. Any other connection (TLS, tests' pipes) reads into
// spill, the handshake's buffer, and the bytes are copied.
type source struct {
	tcp   *net.TCPConn // nil: read conn into spill
	conn  net.Conn
	spill *[inputSize]byte
}

// readByte returns the next byte of the stream from src.
func (in *input) readByte(src *source) (byte, error) {
	for in.r == in.w {
		var n int
		var err error
		if src.tcp != nil {
			n, err = src.tcp.Read(in.buf[:])
		} else {
			n, err = src.conn.Read(src.spill[:])
			copy(in.buf[:], src.spill[:n])
		}
		in.r, in.w = 0, uint8(n)
		if n == 0 && err != nil {
			return 0, err
		}
	}
	b := in.buf[in.r]
	in.r++
	return b, nil
}

// skipBuffered consumes the run of bytes equal to b at the front of what is
// already buffered, without reading from the connection, and returns how
// many it consumed.
func (in *input) skipBuffered(b byte) int {
	n := 0
	for in.r < in.w && in.buf[in.r] == b {
		in.r++
		n++
	}
	return n
}

// wireError is the ERROR a session ends with: a canonical code plus an
// optional reason that replaces the canonical text.
type wireError = claims.WireError

// wireCode is the code and reason that err ends a session or a stream
// with: a *wireError's, or a bare *protocol.Error's (no reason of its
// own). ok is false for any other error: I/O, silence, a reset.
func wireCode(err error) (code *protocol.Error, reason string, ok bool) {
	var we *wireError
	if errors.As(err, &we) {
		return we.Code, we.Reason, true
	}
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe, "", true
	}
	return nil, "", false
}

// errFinished stops the reader of a session that someone else ended.
var errFinished = errors.New("session finished")

// errReset ends a session whose peer reset the connection after its
// ACQUIRE.
var errReset = errors.New("connection reset by peer")

// errSilent ends a session whose lease ran out: no valid frame within the
// lease after the last one.
var errSilent = errors.New("lease expired")

// run is the session's reader, on the goroutine startSession started: it
// reads the ACQUIRE and answers it, then starts the goroutine that answers
// the heartbeats and returns. A session that ends during the handshake ends
// here.
func (ss *session) run() {
	hs := handshakeInputs.Get().(*handshakeInput)
	*hs = handshakeInput{conn: ss.conn}
	err := ss.handshake(hs)
	if err != nil {
		*hs = handshakeInput{}
		handshakeInputs.Put(hs)
		ss.finish(err, time.Time{}) // nothing acknowledged: no lease runs
		return
	}
	if ss.watch != nil {
		go ss.watchHeartbeats(hs)
		return
	}
	if m := ss.streams.Load(); m != nil {
		m.run() // it reads through hs: not recycled
		return
	}
	go ss.heartbeats(hs)
}

// heartbeats is the session's reader from the ACQUIRE's reply on: a
// goroutine of its own, started with the minimum stack (see session). It
// carries on with the bytes the handshake read past the ACQUIRE.
func (ss *session) heartbeats(hs *handshakeInput) {
	in, lastSeen, lease := hs.in, hs.lastSeen, hs.lease
	src := source{conn: ss.conn, spill: &hs.in.buf}
	if tc, ok := ss.conn.(*net.TCPConn); ok {
		src = source{tcp: tc}
		*hs = handshakeInput{}
		handshakeInputs.Put(hs)
	}
	until, err := ss.beat(&in, &src, lastSeen, lease)
	ss.finish(err, until)
}

// finish ends the session for the reason its reader stopped, closes the
// connection, tells the lease record and forgets the session. until is
// when the lease would have run out after the last valid message (zero
// for a session never acknowledged).
func (ss *session) finish(err error, until time.Time) {
	code, reason, coded := wireCode(err)
	switch {
	case coded:
		ss.env.log.Debug("session error", "session", ss.id(), "remote", ss.conn.RemoteAddr(), "code", code.Code, "reason", reason)
		ss.endAndHandOver(code, reason)
	case errors.Is(err, errSilent):
		ss.env.log.Debug("session expired", "session", ss.id(), "remote", ss.conn.RemoteAddr())
		ss.end(nil, "", endExpired, until)
	case errors.Is(err, errReset):
		// A reset is no release: a middlebox or a rebooted host may have
		// sent it, and the holder may not know yet. Its lock is kept until
		// the lease would have run out, as for a silent holder.
		ss.env.log.Debug("session reset", "session", ss.id(), "remote", ss.conn.RemoteAddr())
		ss.end(nil, "", endReset, until)
	default:
		// Peer closed, handshake timeout, or ended by someone else: close
		// without a message. This is how every session ends, so the Debug
		// arguments are only boxed when they will be logged.
		if ss.env.log.Enabled(context.Background(), slog.LevelDebug) {
			ss.env.log.Debug("session closed", "session", ss.id(), "remote", ss.conn.RemoteAddr(), "err", err)
		}
		ss.endAndHandOver(nil, "")
	}
	peerClosed := ss.drainAndClose(until)
	ss.env.claims.Detach(&ss.claim, ss.place, peerClosed || errors.Is(err, io.EOF), until)
	ss.env.forget(ss)
}

// tlsHandshakeFailed reports whether err ended a TLS connection before its
// handshake completed (not a plain close or timeout).
func tlsHandshakeFailed(conn net.Conn, err error) bool {
	tc, ok := conn.(*tls.Conn)
	if !ok || tc.ConnectionState().HandshakeComplete {
		return false
	}
	return err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, net.ErrClosed)
}

// drainAndClose closes the connection; after a final ERROR it first reads
// and discards input until the peer closes or lingerTimeout passes. It
// reports whether the drain ended with the peer's close (EOF).
//
// During a shutdown the drain lasts longer: shutdownLinger (at most three
// quarters of the shutdown's drain), or until the end of the session's
// lease (until) if that comes first. A
// holder that closes after its ERROR 0x01 shows it heard; one that has
// not closed when the drain ends may not have, and the next run keeps
// its lock's wait (claims.Registry.Detach). A client slowed by a loaded
// machine may take more than lingerTimeout to read and close, and its
// lock would wait for nothing.
func (ss *session) drainAndClose(until time.Time) (peerClosed bool) {
	// Whoever ended the session has written its final ERROR once it lets
	// go of ending.
	ss.ending.Lock()
	ss.ending.Unlock()
	if end := ss.state.Load(); end > 0 {
		if d := ss.env.drainUntil.Load(); d > end && until.UnixNano() > end {
			end = min(d, until.UnixNano())
		}
		// Set again: the reader may have moved the deadline since the end.
		_ = ss.conn.SetReadDeadline(time.Unix(0, end))
		var buf [256]byte
		for {
			if _, err := ss.conn.Read(buf[:]); err != nil {
				peerClosed = errors.Is(err, io.EOF)
				break
			}
		}
	}
	ss.conn.Close()
	return peerClosed
}

// handshake reads the ACQUIRE, registers the claim and answers it. It
// records in hs when the lease runs from and how long it is, or returns why
// the session ended.
func (ss *session) handshake(hs *handshakeInput) error {
	// The whole ACQUIRE must arrive within the handshake timeout.
	if err := ss.conn.SetReadDeadline(time.Now().Add(ss.env.handshakeTimeout)); err != nil {
		return err
	}
	t, err := hs.readByte()
	if err != nil {
		return err
	}
	switch t {
	case protocol.MsgAcquire:
	case protocol.MsgWatch:
		return ss.startWatch(hs)
	case protocol.MsgSession:
		return ss.startStreams(hs)
	case protocol.MsgHeartbeat:
		return protocol.ErrExpectedAcquire
	default:
		return unknownType(t)
	}
	// The body is checked field by field in the protocol's validation
	// order; bytes past the frame stay in hs for the heartbeats.
	acq, err := protocol.ReadAcquire(hs)
	if err != nil {
		return err
	}
	lastSeen := time.Now()
	lease := time.Duration(acq.LeaseMS) * time.Millisecond
	req := claims.Request{Name: acq.Name, Lease: lease, Shared: acq.Shared(), Limit: acq.Limit, Value: acq.Value, Conn: ss.conn}
	ss.proclaims = acq.Version >= protocol.VersionValue
	if err := ss.env.claims.Admit(&ss.claim, req); err != nil {
		if errors.Is(err, claims.ErrEnded) {
			return errFinished // kicked during the handshake
		}
		return err
	}
	if err := ss.reply(); err != nil {
		return err
	}
	hs.lastSeen, hs.lease = lastSeen, lease
	return nil
}

// beat answers heartbeats until the session ends, and returns why it
// ended and when its lease runs out after the last valid message.
// Everything it calls while the session lives must fit in the minimum
// goroutine stack: the error paths run once, at the end.
func (ss *session) beat(in *input, src *source, lastSeen time.Time, lease time.Duration) (until time.Time, err error) {
	for {
		// The lease runs from the last valid message; a partial frame does
		// not refresh it.
		until = lastSeen.Add(lease)
		if err := ss.conn.SetReadDeadline(until); err != nil {
			return until, err
		}
		// end, from another goroutine, sets state before it
		// moves the deadline; checking after setting ours means one of the
		// two deadlines that wake us is in force.
		if ss.ended() {
			return until, errFinished
		}
		t, err := in.readByte(src)
		if err != nil {
			return until, ss.readFailed(err)
		}
		switch t {
		case protocol.MsgHeartbeat:
			lastSeen = time.Now()
			// A compliant client never has two heartbeats in flight. A
			// burst that arrived in one read gets one reply, not a write
			// per byte: a pipelining peer cannot make us write for it.
			if extra := in.skipBuffered(protocol.MsgHeartbeat); extra > 0 {
				ss.env.obs.HeartbeatBurst(extra)
			}
			if err := ss.reply(); err != nil {
				return until, ss.replyFailed(err)
			}
		case protocol.MsgProclaim:
			if !ss.proclaims {
				return until, unknownType(t) // versions 1 and 2 stay as they were
			}
			if err := ss.proclaim(in, src); err != nil {
				return until, ss.readFailed(err)
			}
			lastSeen = time.Now()
			if err := ss.reply(); err != nil {
				return until, ss.replyFailed(err)
			}
		case protocol.MsgAcquire:
			return until, protocol.ErrDuplicateAcquire
		default:
			return until, unknownType(t)
		}
	}
}

// proclaim reads a PROCLAIM's body and gives the claim its new value. A
// value too long is refused at its length (ERROR 0x1b), unread. Not
// inlined: the heartbeat loop stays small, and a PROCLAIM is rare.
//
//go:noinline
func (ss *session) proclaim(in *input, src *source) error {
	var n [2]byte
	for i := range n {
		b, err := in.readByte(src)
		if err != nil {
			return err
		}
		n[i] = b
	}
	length := int(n[0])<<8 | int(n[1])
	if length > protocol.MaxValueLen {
		return protocol.ErrValueTooLong
	}
	value := make([]byte, length)
	for i := range value {
		b, err := in.readByte(src)
		if err != nil {
			return err
		}
		value[i] = b
	}
	ss.env.claims.Proclaim(&ss.claim, value)
	return nil
}

// readFailed says why a heartbeat read failed.
func (ss *session) readFailed(err error) error {
	switch {
	case ss.ended():
		return errFinished
	case errors.Is(err, os.ErrDeadlineExceeded):
		return errSilent
	case errors.Is(err, syscall.ECONNRESET):
		return errReset
	case errors.Is(err, io.EOF) && endedWithoutCloseNotify(ss.conn):
		return errReset // a FIN anyone on the path could have injected is no release
	}
	return err
}

// replyFailed says why a heartbeat's acknowledgement was not written. A
// write that fails (the peer reset the connection while we answered, or
// stopped reading) is no release: the holder may still count on the
// acknowledgements it did read, until the lease from the heartbeat before
// this one, so it ends the session as a reset does. A refusal to
// acknowledge (a passive server of a cell) stays what it is.
func (ss *session) replyFailed(err error) error {
	var we *wireError
	switch {
	case ss.ended():
		return errFinished
	case errors.As(err, &we), errors.Is(err, errFinished):
		return err
	}
	return errReset
}

func unknownType(t uint8) error {
	return &wireError{Code: protocol.ErrUnknownMessage, Reason: fmt.Sprintf("unknown message type: 0x%02x", t)}
}

// reply answers an ACQUIRE or HEARTBEAT with the session's state at the
// moment of writing: ACQUIRED with its token once granted, else WAITING.
// Deciding under wmu, which a promotion also takes, keeps the order right:
// a WAITING is never written after the promotion's ACQUIRED.
func (ss *session) reply() error {
	if err := ss.env.claims.MayAcknowledge(); err != nil {
		return err // never acknowledge for a cell this server no longer leads
	}
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	if ss.ended() {
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

// Granted sends the unsolicited ACQUIRED of a promotion (claims.Sink) and
// reports whether it was written. A failed write ends the session; its
// reader then hands the lock to the next waiter.
func (ss *session) Granted(token uint64) bool {
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	if ss.ended() {
		return false
	}
	if err := ss.writeLocked(protocol.AppendAcquired(ss.wbuf[:0], token)); err != nil {
		ss.conn.Close()
		return false
	}
	return true
}

func (ss *session) writeLocked(frame []byte) error {
	if err := ss.conn.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
		return err
	}
	_, err := ss.conn.Write(frame)
	return err
}

// endAndHandOver ends the session once, from whichever goroutine gets there
// first: it stops all further writes, sends final (if any), drops the claim
// from the lock table (promoting the next waiter at once unless the server
// is shutting down), and then either half-closes after final, leaving the
// reader to drain and close, or, with no final message, closes the
// connection. Either way a blocked reader wakes up. It reports whether this
// call ended the session.
func (ss *session) endAndHandOver(final *protocol.Error, reason string) bool {
	return ss.end(final, reason, endRelease, time.Time{})
}

// End is endAndHandOver for the claim layer (claims.Sink).
func (ss *session) End(final *protocol.Error, reason string) bool {
	return ss.endAndHandOver(final, reason)
}

// Peer describes the client for the listing (claims.Sink).
func (ss *session) Peer() (remote, identity string) {
	return ss.conn.RemoteAddr().String(), peer.Primary(ss.conn)
}

// claimEnd says how a session's end ends its claim.
type claimEnd uint8

const (
	endRelease claimEnd = iota // the lock goes on at once
	endExpired                 // the lease ran out: held back for the lock delay
	endReset                   // the connection was reset: held back until the lease ends
)

// end is endAndHandOver, ending the claim as how says: an expired or
// reset holder keeps its lock from the next waiter for a while (see
// claims.Registry.Expire and Reset; until is when the lease runs out).
//
// The final ERROR is written before the claim is dropped: a kicked holder
// must be told before the next waiter is granted its lock.
func (ss *session) end(final *protocol.Error, reason string, how claimEnd, until time.Time) bool {
	ss.wmu.Lock()
	if m := ss.streams.Load(); m != nil {
		ss.wmu.Unlock()
		return m.requestEnd(endRequest{how: how, final: final, reason: reason})
	}
	if ss.ended() {
		ss.wmu.Unlock()
		return false
	}
	ss.ending.Lock() // first: whoever sees the session ended finds it held
	ss.state.Store(stateEnded)
	ss.wmu.Unlock()
	defer ss.ending.Unlock()

	written := final != nil && ss.writeFinal(final, reason)
	switch {
	case ss.watch != nil:
		ss.stopWatch()
	case how == endExpired:
		ss.env.claims.Expire(&ss.claim)
	case how == endReset:
		ss.env.claims.Reset(&ss.claim, until)
	default:
		ss.env.claims.Release(&ss.claim, endReason(final))
	}
	cw, ok := ss.conn.(interface{ CloseWrite() error })
	if !written || !ok || cw.CloseWrite() != nil {
		ss.conn.Close()
		return true
	}
	end := time.Now().Add(lingerTimeout)
	ss.state.Store(end.UnixNano())
	_ = ss.conn.SetReadDeadline(end)
	return true
}

// endReason is how a holding ended by a session's final ERROR ended, for
// watchers: none is the client's own close.
func endReason(final *protocol.Error) uint8 {
	switch final {
	case nil:
		return protocol.EndReleased
	case protocol.ErrAdminClosed:
		return protocol.EndKicked
	case protocol.ErrShuttingDown, protocol.ErrNotActive:
		return protocol.EndSteppedDown
	}
	return protocol.EndFailed
}

// writeFinal sends the session's last message and reports whether it was
// written. No other goroutine writes once the session is ended.
func (ss *session) writeFinal(final *protocol.Error, reason string) bool {
	if reason == "" {
		reason = protocol.ErrCodeName(final.Code)
	}
	_ = ss.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := ss.conn.Write(protocol.AppendError(nil, final.Code, reason)); err != nil {
		return false
	}
	ss.env.obs.ErrorSent(final.Code)
	return true
}

func errText(e *protocol.Error) string { return protocol.ErrCodeName(e.Code) }
