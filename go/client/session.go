package client

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/monolock/monolock/go/client/internal/heartbeat"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// phase is where a session stands in the protocol's state machine.
type phase uint8

const (
	phaseConnecting phase = iota // ACQUIRE sent, no reply yet
	phaseWaiting                 // queued on the server (WAITING received)
	phaseHeld                    // granted; the Lock is in the caller's hands
)

func (p phase) String() string {
	return [...]string{"CONNECTING", "WAITING", "HELD"}[p]
}

// frame is one message from the server, or the read error that ended the
// stream, stamped with the time it was completely read.
type frame struct {
	typ    uint8
	token  uint64
	code   uint8
	reason string
	err    error
	at     time.Time
}

// event is what a session tells the goroutine waiting in Acquire, in order:
// zero or one "waiting", then one outcome (a lock or an error).
type event struct {
	waiting bool
	lock    *Lock
	err     error
	queued  time.Duration // how long the session had been queued
}

// session is one connection: one claim on one lock. Two goroutines serve
// it: read, which turns bytes into frames, and run, which owns every piece
// of protocol state below and is the only writer to the connection.
type session struct {
	conn    net.Conn // TLS or TCP
	raw     net.Conn // the TCP connection, closed to end the session
	name    string
	acquire []byte
	try     bool
	log     *slog.Logger

	frames  chan frame    // read -> run
	events  chan event    // run -> Acquire
	quit    chan struct{} // closed by stop: release or abandon
	closing chan struct{} // closed by run as it exits, so read never blocks
	done    chan struct{} // closed when both goroutines have exited
	once    sync.Once
	// graceful is set by release before quit closes: run then hands the
	// lock back with a half-close and waits for the server to confirm.
	graceful bool

	// Owned by run.
	sched       *heartbeat.Schedule
	phase       phase
	outstanding bool      // an ACQUIRE or HEARTBEAT awaits its reply (never more than one)
	lastSend    time.Time // send time of the newest ACQUIRE/HEARTBEAT
	deadline    time.Time // send of the last acknowledged request + client timeout
	queuedAt    time.Time
	token       uint64
	lock        *Lock
}

func startSession(conn, raw net.Conn, name string, acquire []byte, try bool, cfg *config) *session {
	s := &session{
		conn:    conn,
		raw:     raw,
		name:    name,
		acquire: acquire,
		try:     try,
		log:     sessionLogger(cfg.logger, name, raw),
		frames:  make(chan frame, 1),
		events:  make(chan event, 2),
		quit:    make(chan struct{}),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
		sched:   heartbeat.New(cfg.lease),
	}
	var reader sync.WaitGroup
	reader.Add(1)
	go func() {
		defer reader.Done()
		s.read()
	}()
	go func() {
		s.run()
		close(s.closing)
		s.raw.Close()
		reader.Wait()
		close(s.done)
	}()
	return s
}

// sessionLogger returns the logger of a session: logger with the lock name
// and server address attached. A logger that discards everything is used
// as it is, which spares every claim the cost of building one.
func sessionLogger(logger *slog.Logger, name string, raw net.Conn) *slog.Logger {
	if logger.Handler() == slog.DiscardHandler {
		return logger
	}
	return logger.With("lock", name, "server", raw.RemoteAddr().String())
}

// debugging reports whether s.log keeps Debug records, checked before a
// Debug call whose arguments would otherwise be boxed for nothing.
func (s *session) debugging() bool {
	return s.log.Enabled(context.Background(), slog.LevelDebug)
}

// stop ends the session from outside at once (Acquire giving up). The
// connection is closed right here, so the server frees the place in the
// queue even while run is busy.
func (s *session) stop() {
	s.once.Do(func() {
		close(s.quit)
		s.raw.Close()
	})
}

// release ends the session of a held lock: run half-closes the connection
// and waits (at most releaseWait) until the server closes its side, which it
// does once it has let the lock go. So when Release returns, the lock is
// free on the server, and an acquisition that follows cannot find it busy.
func (s *session) release() {
	s.once.Do(func() {
		s.graceful = true
		close(s.quit)
	})
}

// releaseWait bounds how long a release waits for the server's confirmation.
const releaseWait = time.Second

// handBack half-closes the connection and waits for the server to close its
// side. Acks of a heartbeat still in flight are read and ignored.
func (s *session) handBack() {
	cw, ok := s.conn.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	t := time.NewTimer(min(releaseWait, s.sched.ClientTimeout()))
	defer t.Stop()
	for {
		select {
		case f := <-s.frames:
			if f.err != nil || f.typ == protocol.MsgError {
				return
			}
		case <-t.C:
			return
		}
	}
}

// readBufferSize holds an ACQUIRED (9 bytes) and more: a grant, or a
// promotion and a heartbeat's ack, in one read. Longer frames (an ERROR
// with a long reason) are read through it in several pieces.
const readBufferSize = 64

// read parses frames from the byte stream until it ends. Frames may come
// split over many reads or several in one; bufio plus io.ReadFull (inside
// the protocol package) handle both.
func (s *session) read() {
	r := bufio.NewReaderSize(s.conn, readBufferSize)
	for {
		f := readFrame(r)
		select {
		case s.frames <- f:
		case <-s.closing:
			return
		}
		if f.err != nil || f.typ == protocol.MsgError {
			return // an ERROR is the last thing a session receives
		}
	}
}

// errClosedByServer is the read error of a stream the server closed. Every
// release ends with it, so it is built once.
var errClosedByServer = fmt.Errorf("monolock: connection closed by the server: %w", io.EOF)

func readFrame(r *bufio.Reader) frame {
	var f frame
	f.typ, f.err = r.ReadByte()
	if f.err == nil {
		switch f.typ {
		case protocol.MsgWaiting:
		case protocol.MsgAcquired:
			f.token, f.err = readAcquiredBody(r)
		case protocol.MsgError:
			f.code, f.reason, f.err = protocol.ReadErrorBody(r)
		default:
			f.err = fmt.Errorf("%w: unknown message type 0x%02x", ErrProtocol, f.typ)
		}
	}
	if f.err == io.EOF {
		f.err = errClosedByServer
	} else if f.err != nil && f.err != io.ErrUnexpectedEOF {
		f.err = fmt.Errorf("monolock: connection: %w", f.err)
	}
	f.at = time.Now()
	return f
}

// readAcquiredBody is protocol.ReadAcquiredBody (the token, big-endian)
// taken straight from r's buffer: going through io.Reader costs that
// function an allocation per ACQUIRED, heartbeat acks included. Errors are
// those of io.ReadFull.
func readAcquiredBody(r *bufio.Reader) (uint64, error) {
	b, err := r.Peek(8)
	if err != nil {
		if err == io.EOF && len(b) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return 0, err
	}
	token := binary.BigEndian.Uint64(b)
	_, _ = r.Discard(8)
	return token, nil
}

// run is the session's state machine. It returns when the session ends:
// the lock is lost or released, or the acquisition failed or was abandoned.
func (s *session) run() {
	timeout := s.sched.ClientTimeout()
	if err := s.send(s.acquire); err != nil {
		s.end(err)
		return
	}
	// Until the first reply, the ACQUIRE's own send is the reference.
	s.deadline = s.lastSend.Add(timeout)

	beat := time.NewTimer(0)
	beat.Stop()
	expiry := time.NewTimer(time.Until(s.deadline))
	defer beat.Stop()
	defer expiry.Stop()

	for {
		select {
		case f := <-s.frames:
			wasPending := s.outstanding
			if err := s.handle(f); err != nil {
				s.end(err)
				return
			}
			if s.lock == nil && s.try && s.phase == phaseWaiting {
				return // busy: reported by handle
			}
			if wasPending && !s.outstanding {
				// Acknowledged: the next heartbeat is due one interval
				// after the previous send, at once if that has passed.
				beat.Reset(time.Until(s.lastSend.Add(s.sched.Interval())))
				expiry.Reset(time.Until(s.deadline))
			}
		case <-beat.C:
			if err := s.send([]byte{protocol.MsgHeartbeat}); err != nil {
				s.end(err)
				return
			}
		case <-expiry.C:
			if s.expired() {
				s.end(ErrClientTimeout)
				return
			}
			expiry.Reset(time.Until(s.deadline))
		case <-s.quit:
			if s.lock != nil {
				s.lock.setErr(ErrReleased)
				if s.graceful && !s.lock.lostBeforeRelease() {
					s.handBack()
				}
			}
			return
		}
	}
}

// send writes one request and starts waiting for its reply. The write
// cannot outlive the validity deadline, so a stuck socket is caught by the
// same rule as a silent server.
func (s *session) send(msg []byte) error {
	now := time.Now()
	if !s.deadline.IsZero() {
		_ = s.conn.SetWriteDeadline(s.deadline)
	} else {
		_ = s.conn.SetWriteDeadline(now.Add(s.sched.ClientTimeout()))
	}
	s.lastSend, s.outstanding = now, true
	if _, err := s.conn.Write(msg); err != nil {
		return fmt.Errorf("monolock: connection: %w", err)
	}
	return nil
}

// handle applies one frame to the state. Reply accounting: every request
// gets exactly one reply, and a promotion is one extra ACQUIRED that is
// never an acknowledgement.
func (s *session) handle(f frame) error {
	if f.err != nil {
		return f.err
	}
	switch f.typ {
	case protocol.MsgError:
		return &ServerError{Code: f.code, Reason: f.reason}

	case protocol.MsgWaiting:
		if !s.outstanding || s.phase == phaseHeld {
			return fmt.Errorf("%w: WAITING while %s with no request pending=%v", ErrProtocol, s.phase, s.outstanding)
		}
		if err := s.ack(f.at); err != nil {
			return err
		}
		if s.phase == phaseConnecting {
			s.phase, s.queuedAt = phaseWaiting, f.at
			if s.debugging() {
				s.log.Debug("monolock: waiting")
			}
			if s.try {
				s.events <- event{err: ErrBusy}
				return nil
			}
			s.events <- event{waiting: true}
		}
		return nil

	case protocol.MsgAcquired:
		switch s.phase {
		case phaseConnecting: // the reply to ACQUIRE: granted at once
			if err := s.ack(f.at); err != nil {
				return err
			}
			return s.grant(f.token)
		case phaseWaiting: // the promotion; a pending heartbeat's ack still follows
			return s.grant(f.token)
		default:
			if !s.outstanding {
				return fmt.Errorf("%w: ACQUIRED with no request pending", ErrProtocol)
			}
			if f.token != s.token {
				return fmt.Errorf("%w: token changed from %d to %d", ErrProtocol, s.token, f.token)
			}
			return s.ack(f.at)
		}
	}
	return fmt.Errorf("%w: unexpected message 0x%02x", ErrProtocol, f.typ)
}

// ack takes the reply to the pending request: an RTT sample, and a new
// validity deadline measured from that request's send.
func (s *session) ack(at time.Time) error {
	s.outstanding = false
	s.sched.Observe(at.Sub(s.lastSend))
	next := s.lastSend.Add(s.sched.ClientTimeout())
	if s.lock != nil {
		if !s.lock.extend(next) {
			return ErrClientTimeout
		}
	} else if s.expired() {
		return ErrClientTimeout
	}
	s.deadline = next
	return nil
}

// expired reports whether the validity deadline has passed. For a held lock
// the Lock decides, since its Err may have noticed first.
func (s *session) expired() bool {
	if s.lock != nil {
		return s.lock.expired()
	}
	return !time.Now().Before(s.deadline)
}

// grant hands the lock over to Acquire. Its validity runs from the last
// acknowledged send, which a promotion does not move.
func (s *session) grant(token uint64) error {
	if s.expired() {
		return ErrClientTimeout
	}
	var queued time.Duration
	if s.phase == phaseWaiting {
		queued = time.Since(s.queuedAt)
	}
	s.phase, s.token = phaseHeld, token
	s.lock = &Lock{name: s.name, token: token, sess: s, validUntil: s.deadline}
	if s.debugging() {
		s.log.Debug("monolock: acquired", "token", token, "valid_until", s.deadline)
	}
	s.events <- event{lock: s.lock, queued: queued}
	return nil
}

// end finishes the session with an error: a held lock is lost, any other
// phase reports the failure to Acquire.
func (s *session) end(err error) {
	if s.lock != nil {
		s.log.Info("monolock: lock lost", "err", err)
		s.lock.setErr(lostError(err))
		return
	}
	var queued time.Duration
	if s.phase == phaseWaiting {
		queued = time.Since(s.queuedAt)
	}
	select {
	case <-s.quit: // Acquire gave up; nobody listens
	default:
		s.events <- event{err: err, queued: queued}
	}
}
