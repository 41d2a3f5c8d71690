package server

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/monolock/monolock/go/internal/claims"
	"github.com/monolock/monolock/go/internal/watch"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// A session of streams (protocol version 4) is one connection that
// carries many claims and watches, each a stream with an id its client
// picks (docs/protocol.md, "Version 4: sessions"). It has one reader and
// one writer goroutine however many streams it carries, and a third only
// while OPENs wait for their admission:
//
//   - the reader reads frames, answers what it can at once (HEARTBEAT,
//     RELEASE, ON) by queueing frames, and admits an OPEN of a claim
//     itself when nothing can make it wait (its lease is on record,
//     tokens are in hand, no earlier OPEN waits); any other OPEN goes to
//     the admitter, so that a lease record's fsync never holds up the
//     session's heartbeats or releases, and a wait for a token block
//     never holds up its heartbeats;
//   - the admitter admits the queued claims in their order of arrival
//     (a session's pipelined claims on one name queue in the order sent);
//   - the writer writes whatever is queued, each turn in one write: the
//     reader's replies of a whole read, promotions from other sessions'
//     releases, and the watches' events.
//
// Every end of the session goes through its reader: whoever else ends it
// (a kick, a shutdown, a failed write) records why and wakes the reader,
// which stops the writer, ends every stream and closes the connection.
type streamSession struct {
	ss    *session // the connection: its id, its place in the limits, its env
	env   *sessionEnv
	conn  net.Conn
	lease time.Duration

	// Owned by the reader.
	in       *bufio.Reader
	lastSeen time.Time // of the last whole frame: every claim's lease runs from it
	highest  uint32    // the highest stream id opened: ids only grow

	wake       chan struct{} // the writer's: frames were queued (capacity 1)
	stop       chan struct{} // closed when the session ends: the writer returns
	writerDone chan struct{}
	admitted   sync.WaitGroup // the admitter, while it runs

	mu       sync.Mutex
	streams  map[uint32]*stream // open: being admitted, or live
	watches  map[*stream]struct{}
	out      []byte    // frames queued for the writer
	ends     []*stream // ended streams whose STREAM_END is in out: their claims end once it is written
	admits   []admission
	admitter bool        // the admitter runs
	writing  bool        // a goroutine is writing: it writes what is queued meanwhile too
	spare    []byte      // the last batch written, its buffer reused for the next
	endReq   *endRequest // why another goroutine ended the session; nil while none did
	ended    bool        // the reader is ending the session: nothing more is queued
}

// sessionQueueLimit caps the bytes queued for a session's writer: a
// session whose client stops reading is cut when its claims' frames pass
// it (a watch's events are bounded by their own watch.QueueLimit and cut
// the watch only).
const sessionQueueLimit = 1 << 20

// sessionInputSize is a session's read buffer: a read takes many frames.
const sessionInputSize = 4096

// endRequest is why a goroutine other than the reader ended the session.
type endRequest struct {
	how    claimEnd
	final  *protocol.Error // the ERROR to send first; nil for none
	reason string
}

var errEndRequested = errors.New("session ended by the server")

// startStreams reads a SESSION after its type byte and answers it: the
// connection becomes a session of streams, run by ss's reader.
func (ss *session) startStreams(hs *handshakeInput) error {
	leaseMS, err := protocol.ReadSessionBody(hs)
	if err != nil {
		return err
	}
	lease := time.Duration(leaseMS) * time.Millisecond
	if err := ss.env.claims.CheckSessionLease(lease); err != nil {
		return err
	}
	if err := ss.env.claims.MayAcknowledge(); err != nil {
		return err
	}
	m := &streamSession{
		ss: ss, env: ss.env, conn: ss.conn, lease: lease,
		in:       bufio.NewReaderSize(hs, sessionInputSize),
		lastSeen: time.Now(),
		wake:     make(chan struct{}, 1), stop: make(chan struct{}), writerDone: make(chan struct{}),
		streams: make(map[uint32]*stream), watches: make(map[*stream]struct{}),
	}
	// Under wmu, as end looks: a kick or shutdown either ended the
	// connection before (and it ends as a plain one), or reaches m.
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	if ss.ended() {
		return errFinished
	}
	ss.streams.Store(m)
	return nil
}

// run answers the SESSION, then serves the session until it ends, and
// ends it.
func (m *streamSession) run() {
	// Before the writer starts: SESSION_OK comes before any stream's frame.
	if err := m.conn.SetWriteDeadline(time.Now().Add(writeTimeout)); err == nil {
		_, err = m.conn.Write(protocol.AppendSessionOK(nil, uint32(m.env.maxStreams)))
		if err != nil {
			m.requestEnd(endRequest{how: endReset})
		}
	}
	go m.writeLoop()
	m.finish(m.read())
}

// read reads and serves frames until the session ends, and returns why.
func (m *streamSession) read() error {
	for {
		if m.in.Buffered() == 0 {
			m.flush() // the end of a turn: write its replies at once
			if err := m.conn.SetReadDeadline(m.lastSeen.Add(m.lease)); err != nil {
				return err
			}
			// After setting our deadline: a goroutine that ended the
			// session set endReq before it moved the deadline.
			if m.endRequested() {
				return errEndRequested
			}
		}
		t, err := m.in.ReadByte()
		if err == nil {
			err = m.serve(t)
		}
		if err != nil {
			return m.readFailed(err)
		}
	}
}

// serve reads the rest of the frame that starts with type t and acts on it.
func (m *streamSession) serve(t byte) error {
	switch t {
	case protocol.MsgHeartbeat:
		m.lastSeen = time.Now()
		if extra := m.skipHeartbeats(); extra > 0 {
			m.env.obs.HeartbeatBurst(extra)
		}
		m.queue([]byte{protocol.MsgAlive})
		return nil
	case protocol.MsgOpen:
		return m.open()
	case protocol.MsgOn:
		return m.on()
	case protocol.MsgRelease:
		return m.release()
	}
	return unknownType(t)
}

// skipHeartbeats consumes the run of HEARTBEATs already read: one ALIVE
// answers them all, so a pipelining peer cannot make us write for each.
func (m *streamSession) skipHeartbeats() int {
	n := 0
	for m.in.Buffered() > 0 {
		if b, _ := m.in.Peek(1); b[0] != protocol.MsgHeartbeat {
			break
		}
		_, _ = m.in.ReadByte()
		n++
	}
	return n
}

// streamID reads a frame's stream id and checks that it names a stream
// opened before (ON, RELEASE).
func (m *streamSession) streamID() (uint32, error) {
	id, err := protocol.ReadStreamID(m.in)
	if err != nil {
		return 0, err
	}
	if id == 0 || id > m.highest {
		return 0, &wireError{Code: protocol.ErrBadStream, Reason: fmt.Sprintf("stream %d was never opened", id)}
	}
	return id, nil
}

// open reads an OPEN and opens its stream: a claim is admitted (see
// startAdmission), a watch is subscribed at once (it takes no lease and
// no token).
func (m *streamSession) open() error {
	id, err := protocol.ReadStreamID(m.in)
	if err != nil {
		return err
	}
	if id <= m.highest {
		return &wireError{Code: protocol.ErrBadStream, Reason: fmt.Sprintf("stream %d is not above %d, the last opened", id, m.highest)}
	}
	m.highest = id
	t, err := m.in.ReadByte()
	if err != nil {
		return err
	}
	var leaseMS uint32
	var req claims.Request
	var wreq claims.WatchRequest
	switch t {
	case protocol.MsgAcquire:
		acq, err := protocol.ReadAcquire(m.in)
		if err != nil {
			return err
		}
		leaseMS = acq.LeaseMS
		req = claims.Request{Name: acq.Name, Lease: m.lease, Shared: acq.Shared(), Limit: acq.Limit, Value: acq.Value, Conn: m.conn}
	case protocol.MsgWatch:
		w, err := protocol.ReadWatchBody(m.in)
		if err != nil {
			return err
		}
		leaseMS = w.LeaseMS
		wreq = claims.WatchRequest{Name: w.Name, Epoch: w.Epoch, Seq: w.Seq, Conn: m.conn}
	default:
		return unknownType(t)
	}
	m.lastSeen = time.Now()
	if time.Duration(leaseMS)*time.Millisecond != m.lease {
		m.queue(protocol.AppendStreamEnd(nil, id, protocol.ErrInvalidLease.Code,
			fmt.Sprintf("lease %d ms differs from the session's %d ms", leaseMS, m.lease.Milliseconds())))
		return nil
	}
	st, refused := m.newStream(id)
	if refused != "" {
		m.queue(protocol.AppendStreamEnd(nil, id, protocol.ErrTooManyStreams.Code, refused))
		return nil
	}
	if t == protocol.MsgWatch {
		m.openWatch(st, wreq)
	} else {
		m.startAdmission(st, req)
	}
	return nil
}

// newStream makes stream id, with its place in the session limits, or
// says why the session may not open another.
func (m *streamSession) newStream(id uint32) (*stream, string) {
	m.mu.Lock()
	open := len(m.streams)
	m.mu.Unlock()
	if open >= m.env.maxStreams {
		return nil, fmt.Sprintf("this session has %d streams open, the most it may", open)
	}
	place, why := m.env.takePlace(m.conn.RemoteAddr())
	if why != "" {
		return nil, "session limit reached (" + why + ")"
	}
	st := &stream{m: m, id: id, place: place}
	st.claim.Init(m.env.newID(), st)
	return st, ""
}

// on reads an ON and proclaims its value, answered like a HEARTBEAT of
// the claim. An ON of a stream already ended crossed its end: dropped.
func (m *streamSession) on() error {
	id, err := protocol.ReadStreamID(m.in)
	if err != nil {
		return err
	}
	t, err := m.in.ReadByte()
	if err != nil {
		return err
	}
	if t != protocol.MsgProclaim {
		return unknownType(t)
	}
	value, err := protocol.ReadProclaimBody(m.in)
	if err != nil {
		return err
	}
	if id == 0 || id > m.highest {
		return &wireError{Code: protocol.ErrBadStream, Reason: fmt.Sprintf("stream %d was never opened", id)}
	}
	m.lastSeen = time.Now()
	m.mu.Lock()
	st := m.streams[id]
	switch {
	case st == nil:
		m.mu.Unlock()
		return nil
	case st.watch != nil:
		m.mu.Unlock()
		return &wireError{Code: protocol.ErrBadStream, Reason: fmt.Sprintf("stream %d is a watch: it has no value", id)}
	case st.state == streamAdmitting:
		st.ons++
		st.value = value
		m.mu.Unlock()
		return nil
	}
	m.mu.Unlock()
	m.env.claims.Proclaim(&st.claim, value)
	m.replyState(st)
	return nil
}

// release reads a RELEASE: the claim leaves the table (the next holder is
// granted at once), then RELEASED is queued. A RELEASE of a stream the
// server ended already crossed that end: it is answered all the same.
func (m *streamSession) release() error {
	id, err := m.streamID()
	if err != nil {
		return err
	}
	m.lastSeen = time.Now()
	m.mu.Lock()
	st := m.streams[id]
	switch {
	case st == nil:
		m.queueLocked(protocol.AppendStreamHeader(nil, protocol.MsgReleased, id))
		m.mu.Unlock()
		return nil
	case st.state == streamAdmitting:
		st.releases++ // released once admitted, in order
		m.mu.Unlock()
		return nil
	}
	m.dropLocked(st)
	m.mu.Unlock()
	m.releaseStream(st, protocol.EndReleased)
	m.queue(protocol.AppendStreamHeader(nil, protocol.MsgReleased, id))
	return nil
}

// dropLocked takes st out of the open streams. Caller holds m.mu.
func (m *streamSession) dropLocked(st *stream) {
	delete(m.streams, st.id)
	delete(m.watches, st)
	st.state = streamEnded
}

// releaseStream ends st's claim or watch at once, for why, and gives its
// place back.
func (m *streamSession) releaseStream(st *stream, why uint8) {
	if st.watch != nil {
		m.env.claims.Unwatch(st.watch)
		st.place.Leave()
		return
	}
	m.env.claims.Release(&st.claim, why)
	m.env.claims.Detach(&st.claim, st.place, true, time.Time{})
}

// replyState queues st's state, WAITING or ACQUIRED with its token, as
// the reply to its OPEN or an ON. Deciding under m.mu, which a promotion
// takes too, keeps a WAITING from following the promotion's ACQUIRED.
func (m *streamSession) replyState(st *stream) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if st.state != streamLive {
		return
	}
	m.queueLocked(st.stateFrame())
}

// openWatch subscribes st to its name: the snapshot (or the events since
// the watcher's point) and a WATCHING are queued in the watcher, whose
// frames the writer takes each turn.
func (m *streamSession) openWatch(st *stream, req claims.WatchRequest) {
	st.watch = watch.NewStreamWatcher(protocol.AppendStreamHeader(nil, protocol.MsgStream, st.id), m.wake)
	if err := m.env.claims.Watch(st.watch, req); err != nil {
		st.place.Leave()
		m.queue(streamEndFor(st.id, err))
		return
	}
	m.mu.Lock()
	st.state = streamLive
	m.streams[st.id] = st
	m.watches[st] = struct{}{}
	m.mu.Unlock()
}

// streamEndFor is the STREAM_END that refuses stream id for err.
func streamEndFor(id uint32, err error) []byte {
	code, reason, ok := wireCode(err)
	if !ok {
		return protocol.AppendStreamEnd(nil, id, protocol.ErrShuttingDown.Code, err.Error())
	}
	if reason == "" {
		reason = protocol.ErrCodeName(code.Code)
	}
	return protocol.AppendStreamEnd(nil, id, code.Code, reason)
}

// queue queues frame for the writer; the reader signals it at the end of
// its turn, any other goroutine at once (signal).
func (m *streamSession) queue(frame []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.queueLocked(frame)
}

// queueLocked queues frame unless the session is ending. A session whose
// queue passes sessionQueueLimit reads too slowly: it is cut, and its
// claims are held back as a reset holder's. Caller holds m.mu.
func (m *streamSession) queueLocked(frame []byte) {
	if m.ended || m.endReq != nil {
		return
	}
	if len(m.out)+len(frame) > sessionQueueLimit {
		m.requestEndLocked(endRequest{how: endReset})
		return
	}
	m.out = append(m.out, frame...)
}

// signal wakes the writer.
func (m *streamSession) signal() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// requestEnd ends the session from another goroutine: the reader, woken
// by a deadline in the past, ends it for req. It reports whether this
// call ended it.
func (m *streamSession) requestEnd(req endRequest) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.requestEndLocked(req)
}

func (m *streamSession) requestEndLocked(req endRequest) bool {
	if m.ended || m.endReq != nil {
		return false
	}
	m.endReq = &req
	_ = m.conn.SetReadDeadline(time.Unix(1, 0))
	return true
}

func (m *streamSession) endRequested() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.endReq != nil
}

// readFailed says why the reader stopped.
func (m *streamSession) readFailed(err error) error {
	if m.endRequested() {
		return errEndRequested
	}
	if _, _, ok := wireCode(err); ok {
		return err
	}
	return m.ss.readFailed(err)
}

// finish ends the session for why its reader stopped: it stops the
// writer, sends the final ERROR if there is one, ends every stream as the
// way the session ended says (docs/protocol.md has the table), closes
// the connection and forgets the session.
func (m *streamSession) finish(err error) {
	// The claims read before the end are answered before it: the
	// admitter admits what is queued, and the writer's last turn writes
	// the replies.
	m.admitted.Wait()
	m.mu.Lock()
	m.ended = true
	req := m.endReq
	m.mu.Unlock()
	how, final, reason := endOf(req, err)
	m.env.log.Debug("session of streams ended", "session", m.ss.id(), "remote", m.conn.RemoteAddr(), "err", err)
	close(m.stop)
	if final == nil {
		// Nothing more to write: a write blocked on a client that stopped
		// reading ends now, not at its timeout.
		_ = m.conn.SetWriteDeadline(time.Unix(1, 0))
	}
	<-m.writerDone

	until := m.lastSeen.Add(m.lease)
	written := final != nil && m.ss.writeFinal(final, reason)
	m.mu.Lock()
	streams := m.ends
	for _, st := range m.streams {
		streams = append(streams, st)
	}
	m.streams, m.watches, m.ends = nil, nil, nil
	m.mu.Unlock()
	for _, st := range streams {
		switch {
		case st.watch != nil:
			m.env.claims.Unwatch(st.watch)
		case how == endExpired:
			m.env.claims.Expire(&st.claim)
		case how == endReset:
			m.env.claims.Reset(&st.claim, until)
		default:
			m.env.claims.Release(&st.claim, endReason(final))
		}
	}
	heard := m.drainAndClose(written, until) || errors.Is(err, io.EOF)
	for _, st := range streams {
		if st.watch != nil {
			st.place.Leave()
			continue
		}
		m.env.claims.Detach(&st.claim, st.place, heard, until)
	}
	m.ss.place.Leave()
	m.env.forget(m.ss)
}

// endOf says how a session's claims end: as another goroutine asked, or
// as the reader's error says.
func endOf(req *endRequest, err error) (how claimEnd, final *protocol.Error, reason string) {
	if req != nil {
		return req.how, req.final, req.reason
	}
	if code, reason, ok := wireCode(err); ok {
		return endRelease, code, reason
	}
	switch {
	case errors.Is(err, errSilent):
		return endExpired, nil, ""
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		// The client closed: its claims are released, as a single
		// claim's close releases it.
		return endRelease, nil, ""
	}
	// A reset, or an error that says nothing of the client's intent: no
	// release. The claims are held until the lease would have run out.
	return endReset, nil, ""
}

// drainAndClose closes the connection; after a final ERROR it first
// half-closes and reads until the peer closes or the linger passes (see
// session.drainAndClose). It reports whether the peer closed.
func (m *streamSession) drainAndClose(written bool, until time.Time) (peerClosed bool) {
	cw, ok := m.conn.(interface{ CloseWrite() error })
	if written && ok && cw.CloseWrite() == nil {
		end := time.Now().Add(lingerTimeout)
		if d := m.env.drainUntil.Load(); d > end.UnixNano() && until.After(end) {
			end = time.Unix(0, min(d, until.UnixNano()))
		}
		_ = m.conn.SetReadDeadline(end)
		var buf [256]byte
		for {
			if _, err := m.conn.Read(buf[:]); err != nil {
				peerClosed = errors.Is(err, io.EOF)
				break
			}
		}
	}
	m.conn.Close()
	return peerClosed
}
