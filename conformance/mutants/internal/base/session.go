package base

import (
	"bufio"
	"crypto/tls"
	"errors"
	"net"
	"time"

	"github.com/monolock/monolock/go/pkg/protocol"
	"github.com/monolock/monolock/go/testkit/pipe"
)

// session is one session command: a connection of protocol version 4 that
// carries the claims of every acquire naming it, each on a stream. One
// goroutine (run) owns its state; commands reach it on cmds.
type session struct {
	id             string
	leaseMS        uint64
	servers        []string
	tls            *tls.Config
	connectTimeout time.Duration
	bugs           Bugs
	o              *pipe.Writer
	cmds           chan sessionCmd
	done           chan struct{} // run has returned (after close)
}

type sessionCmd struct {
	kind string // acquire, release, cancel, close
	cl   *claim // acquire
	id   string // release, cancel: the claim's id
}

// The session's state.
const (
	sessConnecting = iota // SESSION sent, no SESSION_OK yet
	sessLive              // claims may be opened
	sessTimedOut          // the deadline passed: told; open until the lease ends
	sessOver              // the connection is closed
)

// The phases of a claim stream.
const (
	stOpening   = iota // OPEN sent, no reply yet
	stWaiting          // queued
	stHeld             // granted
	stReleasing        // RELEASE sent: frames of the stream are dropped until RELEASED
)

type stream struct {
	cl      *claim
	phase   int
	abandon string // releasing because the claim failed (busy, timeout, cancelled): told at RELEASED
	quiet   bool   // released already told (the SessionReleaseWithoutAck bug)
}

// sframe is what the reader hands the session: a whole frame, the type
// byte of an ERROR (code -1: its code did not come with it), or the end.
type sframe struct {
	f    protocol.SessionFrame
	err  bool
	code int
	end  bool
}

func newSession(c pipe.Command, bugs Bugs, o *pipe.Writer) (*session, error) {
	if c.ID == "" || c.LeaseMS == nil || len(c.Servers) == 0 {
		return nil, errors.New("session needs id, servers and lease_ms")
	}
	s := &session{id: c.ID, leaseMS: *c.LeaseMS, servers: c.Servers, connectTimeout: 5 * time.Second,
		bugs: bugs, o: o, cmds: make(chan sessionCmd, 16), done: make(chan struct{})}
	if c.ConnectTimeoutMS != nil {
		s.connectTimeout = time.Duration(*c.ConnectTimeoutMS) * time.Millisecond
	}
	if c.TLS != nil {
		var err error
		if s.tls, err = tlsConfig(c.TLS); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// close closes the session and returns once it is closed.
func (s *session) close() {
	s.cmds <- sessionCmd{kind: "close"}
	<-s.done
}

// sessionFail emits an error or lost event for id; a negative code is none.
func sessionFail(o *pipe.Writer, id, event, kind string, code int) {
	ev := pipe.Event{Name: event, ID: id, Kind: kind, Message: kind}
	if code >= 0 {
		temporary := code < 0x10
		ev.Code, ev.Temporary = &code, &temporary
	}
	o.Emit(ev)
}

// conn is the session's connection and all the state that goes with it.
type sessConn struct {
	*session
	conn     net.Conn
	frames   chan sframe
	quit     chan struct{}
	state    int
	lease    time.Duration
	timeout  time.Duration // the client timeout: 0.8 x lease
	inFlight bool          // SESSION or HEARTBEAT awaits its reply
	lastSend time.Time     // send of the newest SESSION or HEARTBEAT
	acked    time.Time     // send of the newest answered one
	srtt     time.Duration // -1: no sample yet
	lastID   uint32
	streams  map[uint32]*stream
	byClaim  map[string]uint32
	queued   []*claim // acquires that came before SESSION_OK
}

func (s *session) run() {
	defer close(s.done)
	c := &sessConn{session: s, state: sessOver, streams: map[uint32]*stream{}, byClaim: map[string]uint32{}, srtt: -1}
	c.lease = time.Duration(s.leaseMS) * time.Millisecond
	c.timeout = c.lease * 8 / 10
	if s.leaseMS == 0 || s.leaseMS > 0xffffffff {
		sessionFail(s.o, s.id, pipe.Error, "validation", int(protocol.ErrInvalidLease.Code))
	} else {
		c.connect()
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var wake <-chan time.Time
		if next := c.nextWakeup(); !next.IsZero() {
			timer.Reset(time.Until(next))
			wake = timer.C
		}
		select {
		case f, ok := <-c.frames:
			if !ok {
				c.frames = nil
				continue
			}
			c.frame(f)
		case <-wake:
			c.tick(time.Now())
		case cmd := <-s.cmds:
			if cmd.kind == "close" {
				c.closeSession()
				return
			}
			c.command(cmd)
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// connect dials the servers in turn and sends SESSION on the first that
// answers; none: the session fails as a try-acquire would.
func (c *sessConn) connect() {
	cl := &claim{tls: c.tls}
	var err error
	for _, addr := range c.servers {
		if c.conn, err = cl.dial(addr, c.connectTimeout); err == nil {
			break
		}
	}
	if err != nil {
		sessionFail(c.o, c.id, pipe.Error, "connect", -1)
		return
	}
	c.frames, c.quit = make(chan sframe), make(chan struct{})
	go readSession(c.conn, c.frames, c.quit)
	frame, _ := protocol.AppendSession(nil, uint32(c.leaseMS))
	now := time.Now()
	c.state, c.acked = sessConnecting, now
	if !c.send(frame, true) {
		c.end(pipe.Error, "connect", -1)
	}
}

// send writes a frame; request: it is a SESSION or HEARTBEAT, which the
// clock counts from.
func (c *sessConn) send(frame []byte, request bool) bool {
	if request {
		c.lastSend, c.inFlight = time.Now(), true
	}
	_, err := c.conn.Write(frame)
	return err == nil
}

func (c *sessConn) validUntil() time.Time { return c.acked.Add(c.timeout) }

func (c *sessConn) interval() time.Duration {
	base := c.lease / 4
	if c.srtt < 0 {
		return base
	}
	return min(max(base-2*c.srtt, time.Millisecond), base)
}

func (c *sessConn) nextWakeup() time.Time {
	var next time.Time
	switch c.state {
	case sessOver:
		return time.Time{}
	case sessTimedOut:
		return c.acked.Add(c.lease)
	case sessConnecting:
		next = c.validUntil()
	case sessLive:
		next = c.validUntil()
		if hb := c.lastSend.Add(c.interval()); !c.inFlight && hb.Before(next) {
			next = hb
		}
	}
	for _, st := range c.streams {
		if d := st.cl.deadline; !d.IsZero() && (st.phase == stOpening || st.phase == stWaiting) && d.Before(next) {
			next = d
		}
	}
	return next
}

// tick lets time pass: the deadline, a due heartbeat, the end of a lost
// session's lease, the deadline of a waiting claim.
func (c *sessConn) tick(now time.Time) {
	switch c.state {
	case sessOver:
		return
	case sessTimedOut:
		if !now.Before(c.acked.Add(c.lease)) {
			c.closeConn()
		}
		return
	}
	if c.expired(now) {
		return
	}
	for id, st := range c.streams {
		if d := st.cl.deadline; !d.IsZero() && (st.phase == stOpening || st.phase == stWaiting) && !now.Before(d) {
			c.abandon(id, st, "timeout")
		}
	}
	if c.state == sessLive && !c.inFlight && !now.Before(c.lastSend.Add(c.interval())) {
		if !c.send([]byte{protocol.MsgHeartbeat}, true) {
			c.end(pipe.Lost, "io", -1)
		}
	}
}

// expired checks the session's deadline: past it, every held claim is
// told lost, and only then is the connection let go (at the lease's end).
func (c *sessConn) expired(now time.Time) bool {
	if c.state != sessConnecting && c.state != sessLive {
		return true
	}
	if now.Before(c.validUntil()) {
		return false
	}
	if c.bugs.SessionCloseBeforeTell {
		c.closeConn()
	}
	if c.state == sessConnecting {
		sessionFail(c.o, c.id, pipe.Error, "timeout", -1)
	}
	c.endStreams(pipe.Lost, "timeout", -1)
	if c.state != sessOver {
		c.state = sessTimedOut
	}
	return true
}

// endStreams ends every stream: held claims are lost (event lost, kind
// and code as given), others fail with the same kind, claims being
// released count as released.
func (c *sessConn) endStreams(lost, kind string, code int) {
	failKind := kind
	if kind == "io" {
		failKind = "connect" // a claim not granted yet lost its connection
	}
	for id, st := range c.streams {
		switch {
		case st.phase == stReleasing && st.abandon != "":
			sessionFail(c.o, st.cl.id, pipe.Error, st.abandon, -1)
		case st.phase == stReleasing:
			if !st.quiet {
				st.cl.emit(pipe.Event{Name: pipe.Released})
			}
		case st.phase == stHeld:
			sessionFail(c.o, st.cl.id, lost, kind, code)
		default:
			sessionFail(c.o, st.cl.id, pipe.Error, failKind, code)
		}
		delete(c.streams, id)
	}
	for _, cl := range c.queued {
		sessionFail(c.o, cl.id, pipe.Error, failKind, code)
	}
	c.queued = nil
}

// end is the end of the connection by the server (ERROR, EOF, a write
// that failed, bytes that are no session frame): tell, then close.
func (c *sessConn) end(lost, kind string, code int) {
	if c.state == sessConnecting {
		sessionFail(c.o, c.id, pipe.Error, kind, code)
	}
	if c.state == sessConnecting || c.state == sessLive {
		c.endStreams(lost, kind, code)
	}
	c.closeConn()
}

func (c *sessConn) closeConn() {
	if c.conn != nil {
		c.conn.Close()
		close(c.quit)
		c.conn = nil
	}
	c.state = sessOver
}

// closeSession is the application closing the session: every claim counts
// as released (none is told lost), and the close (FIN) releases them on
// the server.
func (c *sessConn) closeSession() {
	for id, st := range c.streams {
		if st.phase == stReleasing && !st.quiet {
			st.cl.emit(pipe.Event{Name: pipe.Released})
		}
		delete(c.streams, id)
	}
	c.queued = nil
	if c.conn != nil {
		if tc, ok := c.conn.(*net.TCPConn); ok {
			if c.bugs.SessionCloseResets {
				_ = tc.SetLinger(0)
			} else {
				_ = tc.CloseWrite()
			}
		}
	}
	c.closeConn()
}

func (c *sessConn) ack(now time.Time) bool {
	if !c.inFlight {
		c.end(pipe.Lost, "io", -1) // a reply with nothing asked
		return false
	}
	c.inFlight = false
	sample := now.Sub(c.lastSend)
	if c.srtt < 0 {
		c.srtt = sample
	} else {
		c.srtt = (c.srtt*8 + sample*2) / 10
	}
	c.acked = c.lastSend
	if c.bugs.SessionTimeoutFromReply {
		c.acked = now
	}
	return true
}

func (c *sessConn) frame(sf sframe) {
	now := time.Now()
	if c.state == sessTimedOut {
		if sf.end || sf.err {
			c.closeConn() // the server has let go
		}
		return // a late reply revives nothing
	}
	if c.state != sessConnecting && c.state != sessLive {
		return
	}
	// The deadline first: once it has passed, nothing still in the
	// receive buffer can save the claims.
	if c.expired(now) {
		return
	}
	switch {
	case sf.end:
		c.end(pipe.Lost, "io", -1)
		return
	case sf.err:
		c.end(pipe.Lost, "server", sf.code)
		return
	}
	f := sf.f
	switch f.Type {
	case protocol.MsgSessionOK:
		if c.state != sessConnecting || !c.ack(now) {
			c.end(pipe.Lost, "io", -1)
			return
		}
		c.state = sessLive
		c.o.Emit(pipe.Event{Name: pipe.Opened, ID: c.id})
		queued := c.queued
		c.queued = nil
		for _, cl := range queued {
			c.open(cl)
		}
	case protocol.MsgAlive:
		if c.state != sessLive || !c.ack(now) {
			c.end(pipe.Lost, "io", -1)
			return
		}
	case protocol.MsgStream:
		c.streamFrame(f, now)
	case protocol.MsgReleased:
		st := c.streams[f.Stream]
		if st == nil || st.phase != stReleasing {
			return
		}
		delete(c.streams, f.Stream)
		switch {
		case st.abandon != "":
			sessionFail(c.o, st.cl.id, pipe.Error, st.abandon, -1)
		case !st.quiet:
			st.cl.emit(pipe.Event{Name: pipe.Released})
		}
	case protocol.MsgStreamEnd:
		st := c.streams[f.Stream]
		if st == nil || st.phase == stReleasing {
			return // RELEASED follows: the two crossed
		}
		if c.bugs.StreamEndEndsSession {
			c.end(pipe.Lost, "server", int(f.Code))
			return
		}
		delete(c.streams, f.Stream)
		if st.phase == stHeld {
			sessionFail(c.o, st.cl.id, pipe.Lost, "server", int(f.Code))
		} else {
			sessionFail(c.o, st.cl.id, pipe.Error, "server", int(f.Code))
		}
	default:
		c.end(pipe.Lost, "io", -1)
	}
}

func (c *sessConn) streamFrame(f protocol.SessionFrame, now time.Time) {
	st := c.streams[f.Stream]
	if st == nil || st.phase == stReleasing {
		return
	}
	switch f.Inner {
	case protocol.MsgWaiting:
		if st.phase != stOpening {
			return // the reply to an ON: none are sent
		}
		if st.cl.mode == pipe.ModeTry && !c.bugs.TryBusyKeepsWaiting {
			c.abandon(f.Stream, st, "busy")
			return
		}
		st.phase = stWaiting
		st.cl.emit(pipe.Event{Name: pipe.Waiting})
	case protocol.MsgAcquired:
		if st.phase == stHeld {
			return
		}
		st.phase = stHeld
		valid := float64(c.validUntil().Sub(now)) / float64(time.Millisecond)
		st.cl.emit(pipe.Event{Name: pipe.Acquired, Token: itoa(f.Token), ValidMS: &valid})
	}
}

// abandon releases the stream of a claim that failed before it was
// granted; the failure is told once RELEASED comes.
func (c *sessConn) abandon(id uint32, st *stream, why string) {
	st.phase, st.abandon = stReleasing, why
	if !c.send(protocol.AppendStreamHeader(nil, protocol.MsgRelease, id), false) {
		c.end(pipe.Lost, "io", -1)
	}
}

// open sends the OPEN of a claim on the live session.
func (c *sessConn) open(cl *claim) {
	id := c.lastID + 1
	if c.bugs.ReuseStreamID {
		id = 1
		for c.streams[id] != nil {
			id++
		}
	}
	if id == 0 {
		sessionFail(c.o, cl.id, pipe.Error, "connect", -1) // every id used: a new session is needed
		return
	}
	c.lastID = max(c.lastID, id)
	c.streams[id] = &stream{cl: cl}
	c.byClaim[cl.id] = id
	frame := append(protocol.AppendStreamHeader(nil, protocol.MsgOpen, id), cl.acquireFrame()...)
	if !c.send(frame, false) {
		c.end(pipe.Lost, "io", -1)
	}
}

func (c *sessConn) command(cmd sessionCmd) {
	switch cmd.kind {
	case "acquire":
		cl := cmd.cl
		if code := cl.validate(); code != 0 {
			cl.fail(pipe.Error, "validation", code)
			return
		}
		switch c.state {
		case sessConnecting:
			c.queued = append(c.queued, cl)
		case sessLive:
			c.open(cl)
		default:
			cl.fail(pipe.Error, "connect", -1) // the session is over
		}
	case "release", "cancel":
		for i, cl := range c.queued {
			if cl.id == cmd.id {
				c.queued = append(c.queued[:i:i], c.queued[i+1:]...)
				cl.stopped(cmd.kind, false)
				return
			}
		}
		id, ok := c.byClaim[cmd.id]
		st := c.streams[id]
		if !ok || st == nil || c.state != sessLive {
			if cmd.kind == "release" {
				c.o.Emit(pipe.Event{Name: pipe.Released, ID: cmd.id})
			}
			return
		}
		switch {
		case st.phase == stReleasing:
			return // its end is told when RELEASED comes
		case cmd.kind == "cancel" && st.phase == stHeld:
			return // nothing pending to cancel
		case cmd.kind == "cancel":
			c.abandon(id, st, "cancelled")
			return
		}
		st.phase = stReleasing
		if c.bugs.SessionReleaseWithoutAck {
			st.quiet = true
			st.cl.emit(pipe.Event{Name: pipe.Released})
		}
		if !c.send(protocol.AppendStreamHeader(nil, protocol.MsgRelease, id), false) {
			c.end(pipe.Lost, "io", -1)
		}
	}
}

// readSession turns the byte stream into session frames until it ends. An
// ERROR ends the session at its type byte: its code is taken only if it
// came in the same read.
func readSession(conn net.Conn, frames chan<- sframe, quit <-chan struct{}) {
	defer close(frames)
	deliver := func(f sframe) bool {
		select {
		case frames <- f:
			return true
		case <-quit:
			return false
		}
	}
	br := bufio.NewReader(conn)
	for {
		t, err := br.Peek(1)
		if err != nil {
			deliver(sframe{end: true})
			return
		}
		if t[0] == protocol.MsgError {
			_, _ = br.ReadByte()
			f := sframe{err: true, code: -1}
			if br.Buffered() > 0 {
				c, _ := br.ReadByte()
				f.code = int(c)
			}
			deliver(f)
			return
		}
		f, err := protocol.ReadSessionFrame(br)
		if err != nil {
			deliver(sframe{end: true})
			return
		}
		if !deliver(sframe{f: f}) {
			return
		}
	}
}
