package base

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/monolock/monolock/go/pkg/protocol"
	"github.com/monolock/monolock/go/testkit/pipe"
)

const (
	msgAcquire   = 0x01
	msgHeartbeat = 0x02
	msgProclaim  = 0x03
	msgWaiting   = 0x11
	msgAcquired  = 0x12
	msgError     = 0x13
)

// claim is one acquire command: one lock claim, possibly over several
// connections while it waits.
type claim struct {
	id, name, mode string
	leaseMS        uint64
	shared         bool
	limit          int
	value          *string     // a campaign's value (version 3 ACQUIRE); nil: none
	proclaims      chan string // proclaim commands, for the session that holds
	servers        []string
	deadline       time.Time // zero: wait forever
	connectTimeout time.Duration
	tls            *tls.Config // nil: plain TCP
	bugs           Bugs
	o              *pipe.Writer

	mu   sync.Mutex
	done bool
	ctl  chan string // release, cancel, quit
}

func newClaim(c pipe.Command, bugs Bugs, o *pipe.Writer) (*claim, error) {
	name, err := c.LockName()
	if err != nil {
		return nil, err
	}
	cl := &claim{id: c.ID, name: name, mode: c.Mode, servers: c.Servers, bugs: bugs, o: o,
		ctl: make(chan string, 8), connectTimeout: 5 * time.Second}
	if c.LeaseMS != nil {
		cl.leaseMS = *c.LeaseMS
	}
	cl.shared, cl.value, cl.proclaims = c.Shared, c.Value, make(chan string, 8)
	if c.Limit != nil {
		cl.limit = *c.Limit
	}
	if c.TimeoutMS != nil {
		cl.deadline = time.Now().Add(time.Duration(*c.TimeoutMS) * time.Millisecond)
	}
	if c.ConnectTimeoutMS != nil {
		cl.connectTimeout = time.Duration(*c.ConnectTimeoutMS) * time.Millisecond
	}
	if c.TLS != nil {
		if cl.tls, err = tlsConfig(c.TLS); err != nil {
			return nil, err
		}
	}
	return cl, nil
}

// emit writes ev as this claim's.
func (cl *claim) emit(ev pipe.Event) {
	ev.ID = cl.id
	cl.o.Emit(ev)
}

// fail emits an error or lost event; a negative code is none (null).
func (cl *claim) fail(event, kind string, code int) {
	ev := pipe.Event{Name: event, Kind: kind, Message: kind}
	if code >= 0 {
		temporary := code < 0x10
		ev.Code, ev.Temporary = &code, &temporary
	}
	cl.emit(ev)
}

// stop delivers release, cancel or quit to the claim's goroutine.
func (cl *claim) stop(kind string) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.done {
		if kind == "release" {
			cl.emit(pipe.Event{Name: pipe.Released})
		}
		return
	}
	cl.ctl <- kind
}

// finish marks the claim over and answers commands that raced with the end.
func (cl *claim) finish() {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.done = true
	for {
		select {
		case k := <-cl.ctl:
			if k == "release" {
				cl.emit(pipe.Event{Name: pipe.Released})
			}
		default:
			return
		}
	}
}

// validate returns the wire code the server would send for this input, or 0.
func (cl *claim) validate() int {
	switch {
	case cl.leaseMS == 0 || cl.leaseMS > 0xffffffff:
		return int(protocol.ErrInvalidLease.Code)
	case cl.limit < 0 || cl.limit > 0xffff:
		return int(protocol.ErrInvalidMode.Code)
	case cl.bugs.SkipNameValidation:
		return 0
	case len(cl.name) == 0:
		return int(protocol.ErrEmptyName.Code)
	case len(cl.name) > 255:
		return int(protocol.ErrNameTooLong.Code)
	case !utf8.ValidString(cl.name):
		return int(protocol.ErrNameNotUTF8.Code)
	}
	return 0
}

// acquireFrame is the claim's ACQUIRE: version 1 for an exclusive claim,
// version 2 (mode, limit) for a shared one, version 3 for one with a value.
func (cl *claim) acquireFrame() []byte {
	v3 := cl.value != nil && *cl.value != ""
	v2 := cl.shared || cl.bugs.SharedFrameForExclusive || v3
	frame := []byte{msgAcquire, 1}
	if v2 {
		frame[1] = 2
	}
	if v3 {
		frame[1] = 3
	}
	frame = binary.BigEndian.AppendUint32(frame, uint32(cl.leaseMS))
	if v2 {
		mode := byte(0)
		if cl.shared {
			mode = 1
		}
		limit := cl.limit
		if cl.bugs.SemaphoreLimitPlusOne && limit > 0 {
			limit++
		}
		frame = append(frame, mode)
		frame = binary.BigEndian.AppendUint16(frame, uint16(limit))
	}
	frame = binary.BigEndian.AppendUint16(frame, uint16(len(cl.name)))
	frame = append(frame, cl.name...)
	if v3 {
		frame = binary.BigEndian.AppendUint16(frame, uint16(len(*cl.value)))
		frame = append(frame, *cl.value...)
	}
	return frame
}

// failure is why a waiting attempt ended in a way that may be retried.
type failure struct {
	kind string // connect or server
	code int    // -1: none
}

func (cl *claim) run() {
	defer cl.finish()
	if code := cl.validate(); code != 0 {
		cl.fail(pipe.Error, "validation", code)
		return
	}
	frame := cl.acquireFrame()
	refused := map[int]bool{} // servers that refused a certificate: not asked again
	for attempt := 0; ; attempt++ {
		i := attempt % len(cl.servers)
		if refused[i] {
			continue
		}
		retry, f := cl.session(frame, cl.servers[i])
		if !retry {
			return
		}
		if f.kind == kindCertRefused {
			refused[i] = true
			if len(refused) == len(cl.servers) {
				cl.fail(pipe.Error, "connect", -1)
				return
			}
			continue
		}
		if cl.mode == pipe.ModeTry {
			cl.fail(pipe.Error, f.kind, f.code)
			return
		}
		// Equal jitter: 50 ms doubling to 2 s, half fixed, half random.
		d := min(2*time.Second, 50*time.Millisecond<<min(attempt, 6))
		d = d/2 + rand.N(d/2+1)
		var deadline <-chan time.Time
		if !cl.deadline.IsZero() {
			deadline = time.After(time.Until(cl.deadline))
		}
		select {
		case <-time.After(d):
		case <-deadline:
			cl.fail(pipe.Error, "timeout", -1)
			return
		case k := <-cl.ctl:
			cl.stopped(k, false)
			return
		}
	}
}

// stopped reports a release, cancel or quit that ended the claim.
func (cl *claim) stopped(kind string, held bool) {
	switch {
	case kind == "release":
		cl.emit(pipe.Event{Name: pipe.Released})
	case kind == "cancel" && !held:
		cl.fail(pipe.Error, "cancelled", -1)
	}
}

// A TLS handshake that failed on a certificate fails the same way again
// (spec/constants.json, tls_certificate_rule): that server is not asked
// again, and with none left the claim fails at once.
const (
	kindCertRefused  = "cert-refused" // a failure's kind, never an event's
	frameCertRefused = 0              // a frame type no server sends
)

// certRefused reports a certificate refused by either side of a handshake.
func certRefused(err error) bool {
	var verify *tls.CertificateVerificationError
	if errors.As(err, &verify) {
		return true
	}
	msg := err.Error()
	for _, alert := range []string{"bad certificate", "unknown certificate authority", "certificate required",
		"unsupported certificate", "revoked certificate", "expired certificate", "unknown certificate", "access denied"} {
		if strings.Contains(msg, "remote error: tls: "+alert) {
			return true
		}
	}
	return false
}

type frame struct {
	typ   byte
	token uint64
	code  int // ERROR: -1 when the code byte had not arrived with the type byte
}

// session runs one connection. It returns retry=true when a waiting claim
// should try again on a new connection; every other end emits its event.
func (cl *claim) session(acquire []byte, addr string) (bool, failure) {
	dialTimeout := cl.connectTimeout
	if !cl.deadline.IsZero() {
		dialTimeout = min(dialTimeout, time.Until(cl.deadline))
	}
	conn, err := cl.dial(addr, dialTimeout)
	if err != nil {
		if certRefused(err) && !cl.bugs.RetryCertificateProblems {
			return true, failure{kindCertRefused, -1}
		}
		return true, failure{"connect", -1}
	}
	defer conn.Close()
	frames := make(chan frame)
	quit := make(chan struct{})
	defer close(quit)
	go cl.read(conn, frames, quit)

	lease := time.Duration(cl.leaseMS) * time.Millisecond
	clientTimeout := lease * 8 / 10
	sent := time.Now()
	if _, err := conn.Write(acquire); err != nil {
		return true, failure{"connect", -1}
	}
	pending := []time.Time{sent} // requests not yet answered, oldest first
	lastSend, validFrom := sent, sent
	srtt := time.Duration(-1)
	held, waiting, hbDue := false, false, false
	var proclaimDue []byte      // a PROCLAIM waiting for the reply in flight
	var proclaimInFlight []bool // per pending request: is it a PROCLAIM

	interval := func() time.Duration {
		if cl.bugs.FixedHalfLease {
			return lease / 2
		}
		base := lease / 4
		if srtt < 0 {
			return base
		}
		return min(max(base-2*srtt, time.Millisecond), base)
	}
	hb := time.NewTimer(interval())
	defer hb.Stop()
	timeout := time.NewTimer(clientTimeout)
	defer timeout.Stop()
	var deadline <-chan time.Time
	if !cl.deadline.IsZero() {
		deadline = time.After(time.Until(cl.deadline))
	}

	proclaimInFlight = append(proclaimInFlight, false) // the ACQUIRE
	sendRequest := func(frame []byte, proclaim bool) bool {
		lastSend = time.Now()
		pending = append(pending, lastSend)
		proclaimInFlight = append(proclaimInFlight, proclaim)
		hb.Reset(interval())
		_, err := conn.Write(frame)
		return err == nil
	}
	sendHeartbeat := func() bool { return sendRequest([]byte{msgHeartbeat}, false) }
	ack := func() {
		if len(pending) == 0 {
			return // an extra reply: nothing to account it to
		}
		now := time.Now()
		sample := now.Sub(pending[0])
		if srtt < 0 {
			srtt = sample
		} else {
			srtt = (srtt*8 + sample*2) / 10
		}
		validFrom = pending[0]
		if cl.bugs.TimeoutFromReply {
			validFrom = now
		}
		pending = pending[1:]
		if proclaimInFlight[0] {
			cl.emit(pipe.Event{Name: pipe.Proclaimed})
		}
		proclaimInFlight = proclaimInFlight[1:]
		timeout.Reset(time.Until(validFrom.Add(clientTimeout)))
		switch {
		case proclaimDue != nil:
			frame := proclaimDue
			proclaimDue, hbDue = nil, false
			sendRequest(frame, true)
		case hbDue:
			hbDue = false
			sendHeartbeat()
		default:
			hb.Reset(time.Until(lastSend.Add(interval())))
		}
	}
	validMS := func() *float64 {
		v := float64(time.Until(validFrom.Add(clientTimeout))) / float64(time.Millisecond)
		return &v
	}
	ioEnd := func() (bool, failure) {
		if held {
			cl.fail(pipe.Lost, "io", -1)
			return false, failure{}
		}
		return true, failure{"connect", -1}
	}

	for {
		select {
		case f, ok := <-frames:
			if !ok {
				return ioEnd()
			}
			switch f.typ {
			case frameCertRefused:
				return true, failure{kindCertRefused, -1}
			case msgWaiting:
				ack()
				if !waiting && !held {
					if cl.mode == pipe.ModeTry {
						cl.fail(pipe.Error, "busy", -1)
						return false, failure{}
					}
					waiting = true
					cl.emit(pipe.Event{Name: pipe.Waiting})
				}
			case msgAcquired:
				switch {
				case waiting:
					// The promotion: never the ack of an in-flight heartbeat.
					if cl.bugs.PromotionIsAck {
						ack()
					}
					waiting, held = false, true
					cl.emit(pipe.Event{Name: pipe.Acquired, Token: itoa(f.token), ValidMS: validMS()})
				case !held:
					ack()
					held = true
					cl.emit(pipe.Event{Name: pipe.Acquired, Token: itoa(f.token), ValidMS: validMS()})
				default:
					ack()
				}
			case msgError:
				code := f.code // -1: no code (a waiting claim queues again)
				switch {
				case held:
					cl.fail(pipe.Lost, "server", code)
				case code < 0x10 && cl.mode == pipe.ModeWait:
					return true, failure{"server", code}
				case code == 0x10 && cl.shared && cl.bugs.RetryUnsupportedShared && cl.mode == pipe.ModeWait:
					return true, failure{"server", code}
				default:
					cl.fail(pipe.Error, "server", code)
				}
				return false, failure{}
			default:
				return ioEnd() // a byte that is not a server message
			}
		case <-hb.C:
			if len(pending) > 0 {
				hbDue = true // one in flight at most: send when it is answered
			} else if !sendHeartbeat() {
				return ioEnd()
			}
		case <-timeout.C:
			if held {
				if cl.bugs.CloseBeforeTell {
					conn.Close()
				}
				cl.fail(pipe.Lost, "timeout", -1)
				cl.holdOn(frames, validFrom.Add(lease))
				return false, failure{}
			}
			return true, failure{"connect", -1}
		case <-deadline:
			if !held {
				cl.fail(pipe.Error, "timeout", -1)
				return false, failure{}
			}
		case v := <-cl.proclaims:
			frame := binary.BigEndian.AppendUint16([]byte{msgProclaim}, uint16(len(v)))
			frame = append(frame, v...)
			if len(pending) > 0 {
				proclaimDue = frame // one request in flight at most; the newest value wins
			} else if !sendRequest(frame, true) {
				return ioEnd()
			}
		case k := <-cl.ctl:
			if k == "release" && held && !cl.bugs.ReleaseWithoutWait {
				// The server lets the lock go before it closes: wait for
				// that, so the lock is free when released is out.
				halfCloseAndWait(conn, frames)
			}
			cl.stopped(k, held)
			if k == "cancel" && held {
				continue // nothing pending to cancel
			}
			return false, failure{}
		}
	}
}

// holdOn keeps the connection of a lock whose loss has been told open
// until the application lets go or until closeAt (last acked send + lease),
// so the server cannot hand the lock on before the holder knows. What
// arrives meanwhile is read and ignored: a late ack revives nothing.
func (cl *claim) holdOn(frames <-chan frame, closeAt time.Time) {
	limit := time.NewTimer(time.Until(closeAt))
	defer limit.Stop()
	for {
		select {
		case f, ok := <-frames:
			if !ok || f.typ == msgError {
				return // the server has let go
			}
		case <-limit.C:
			return
		case k := <-cl.ctl:
			if k == "cancel" {
				continue // nothing pending to cancel
			}
			cl.stopped(k, true)
			return
		}
	}
}

// dial connects (TCP_NODELAY) and, with TLS, completes the handshake.
func (cl *claim) dial(addr string, timeout time.Duration) (net.Conn, error) {
	nc, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	_ = nc.(*net.TCPConn).SetNoDelay(true)
	if cl.tls == nil {
		return nc, nil
	}
	cfg := cl.tls
	if cfg.ServerName == "" {
		cfg = cfg.Clone()
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
	}
	tc := tls.Client(nc, cfg)
	_ = tc.SetDeadline(time.Now().Add(timeout))
	if err := tc.Handshake(); err != nil {
		nc.Close()
		return nil, err
	}
	_ = tc.SetDeadline(time.Time{})
	return tc, nil
}

// halfCloseAndWait ends the sending side and waits (2 s at most) until the
// server has closed its side, discarding what it still sends.
func halfCloseAndWait(conn net.Conn, frames <-chan frame) {
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	limit := time.After(2 * time.Second)
	for {
		select {
		case _, ok := <-frames:
			if !ok {
				return
			}
		case <-limit:
			return
		}
	}
}

// read turns the byte stream into frames until the connection ends.
func (cl *claim) read(conn net.Conn, frames chan<- frame, quit <-chan struct{}) {
	defer close(frames)
	deliver := func(f frame) bool {
		select {
		case frames <- f:
			return true
		case <-quit:
			return false
		}
	}
	if cl.bugs.OneReadOneMessage {
		buf := make([]byte, 512)
		for {
			n, err := conn.Read(buf)
			if n > 0 {
				var msg [9]byte // a short read leaves zeros: the bug
				copy(msg[:], buf[:n])
				f := frame{typ: msg[0], token: binary.BigEndian.Uint64(msg[1:9]), code: int(msg[1])}
				if !deliver(f) {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	br := bufio.NewReader(conn)
	for {
		t, err := br.ReadByte()
		if err != nil {
			if certRefused(err) && !cl.bugs.RetryCertificateProblems { // TLS 1.3: the server's verdict on our certificate
				deliver(frame{typ: frameCertRefused})
			}
			return
		}
		f := frame{typ: t}
		switch t {
		case msgAcquired:
			var b [8]byte
			if _, err := io.ReadFull(br, b[:]); err != nil {
				return
			}
			f.token = binary.BigEndian.Uint64(b[:])
		case msgError:
			if cl.bugs.WaitWholeError {
				var h [2]byte
				if _, err := io.ReadFull(br, h[:]); err != nil {
					return
				}
				if _, err := io.CopyN(io.Discard, br, int64(h[1])); err != nil {
					return
				}
				f.code = int(h[0])
				break
			}
			// An ERROR ends the session at its type byte: take the code if
			// it came with it, and never wait for the rest.
			f.code = -1
			if br.Buffered() > 0 {
				c, _ := br.ReadByte()
				f.code = int(c)
			}
			_ = deliver(f)
			return
		}
		if !deliver(f) {
			return
		}
	}
}

func itoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}
