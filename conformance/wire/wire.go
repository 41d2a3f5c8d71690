// Package wire records what crosses a monolock connection and reads it back
// as frames, so the runner can judge a client by what it actually sent and
// received: which reply acknowledged which send, how many requests were in
// flight, when the heartbeats left.
//
// Both the fake server and the fault proxy record into a Record. Times are
// durations since the scenario started (monotonic clock). Bytes from the
// client are stamped after the read returns, bytes to the client just before
// the write starts, so causality survives: a client send caused by a reply is
// always stamped later than that reply.
package wire

import (
	"encoding/binary"
	"fmt"
	"sync"
	"time"
)

// Dir is the direction of a chunk.
type Dir int

const (
	Up   Dir = iota // client -> server
	Down            // server -> client
)

// Chunk is one read (Up) or one write (Down).
type Chunk struct {
	At   time.Duration
	Dir  Dir
	Data []byte
}

// Record is the thread-safe log of one connection.
type Record struct {
	mu           sync.Mutex
	chunks       []Chunk
	clientClosed time.Duration // when the client ended the connection, -1 while open
	ended        bool          // nothing more will be read, whoever closed
	changed      chan struct{} // closed and replaced on every change
}

// NewRecord returns an empty record.
func NewRecord() *Record {
	return &Record{clientClosed: -1, changed: make(chan struct{})}
}

func (r *Record) notify() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// Add appends a chunk.
func (r *Record) Add(at time.Duration, d Dir, data []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.chunks = append(r.chunks, Chunk{At: at, Dir: d, Data: append([]byte(nil), data...)})
	r.notify()
}

// ClientClosed notes that the client closed (or reset) the connection.
func (r *Record) ClientClosed(at time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.clientClosed < 0 {
		r.clientClosed = at
		r.ended = true
		r.notify()
	}
}

// End notes that nothing more will be read from the client, for whatever
// reason (the server side closed, or the client did).
func (r *Record) End() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.ended {
		r.ended = true
		r.notify()
	}
}

// Ended reports whether End was called, and a channel closed at the next change.
func (r *Record) Ended() (bool, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ended, r.changed
}

// Snapshot returns the chunks so far, when the client closed (-1: not yet),
// and a channel closed at the next change.
func (r *Record) Snapshot() ([]Chunk, time.Duration, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Chunk(nil), r.chunks...), r.clientClosed, r.changed
}

// Frame is one parsed message.
type Frame struct {
	At   time.Duration // stamp of the chunk that completed the frame
	Type byte
	Raw  []byte
	// Token (ACQUIRED), Code and Reason (ERROR), LeaseMS and Name (ACQUIRE).
	Token   uint64
	Code    byte
	Reason  string
	LeaseMS uint32
	Name    string
}

// Message types, repeated here so the runner does not depend on the package
// under test to judge it.
const (
	Acquire   byte = 0x01
	Heartbeat byte = 0x02
	Proclaim  byte = 0x03
	Watch     byte = 0x04
	Waiting   byte = 0x11
	Acquired  byte = 0x12
	Error     byte = 0x13
	Event     byte = 0x14
	Watching  byte = 0x15

	// Protocol version 4: sessions.
	Session   byte = 0x05
	Open      byte = 0x06
	On        byte = 0x07
	Release   byte = 0x08
	SessionOK byte = 0x16
	Stream    byte = 0x17
	Released  byte = 0x18
	StreamEnd byte = 0x19
	Alive     byte = 0x1a
)

// TypeName names a message type.
func TypeName(t byte) string {
	switch t {
	case Acquire:
		return "ACQUIRE"
	case Heartbeat:
		return "HEARTBEAT"
	case Waiting:
		return "WAITING"
	case Acquired:
		return "ACQUIRED"
	case Error:
		return "ERROR"
	case Proclaim:
		return "PROCLAIM"
	case Watch:
		return "WATCH"
	case Event:
		return "EVENT"
	case Watching:
		return "WATCHING"
	case Session:
		return "SESSION"
	case Open:
		return "OPEN"
	case On:
		return "ON"
	case Release:
		return "RELEASE"
	case SessionOK:
		return "SESSION_OK"
	case Stream:
		return "STREAM"
	case Released:
		return "RELEASED"
	case StreamEnd:
		return "STREAM_END"
	case Alive:
		return "ALIVE"
	}
	return fmt.Sprintf("0x%02x", t)
}

// frameLen returns the length of the frame at the start of b, 0 if more bytes
// are needed, or an error if b cannot start a frame in direction d.
func frameLen(b []byte, d Dir) (int, error) {
	need := func(n int) (int, error) {
		if len(b) < n {
			return 0, nil
		}
		return n, nil
	}
	switch {
	case d == Up && b[0] == Acquire:
		return acquireLen(b)
	case d == Up && b[0] == Proclaim:
		return fieldsLen(b, 1, lenField(2))
	case d == Up && b[0] == Watch:
		return fieldsLen(b, 2+4, lenField(2), 16)
	case d == Down && b[0] == Event:
		return eventLen(b)
	case d == Down && b[0] == Watching:
		return need(17)
	case d == Up && b[0] == Heartbeat:
		return 1, nil
	case d == Up && b[0] == Session:
		return need(6)
	case d == Up && (b[0] == Open || b[0] == On):
		return enveloped(b, d)
	case d == Up && b[0] == Release, d == Down && (b[0] == SessionOK || b[0] == Released):
		return need(5)
	case d == Down && b[0] == Stream:
		return enveloped(b, d)
	case d == Down && b[0] == StreamEnd:
		if len(b) < 7 {
			return 0, nil
		}
		return need(7 + int(b[6]))
	case d == Down && b[0] == Alive:
		return 1, nil
	case d == Down && b[0] == Waiting:
		return 1, nil
	case d == Down && b[0] == Acquired:
		return need(9)
	case d == Down && b[0] == Error:
		if len(b) < 3 {
			return 0, nil
		}
		return need(3 + int(b[2]))
	}
	return 0, fmt.Errorf("unexpected byte 0x%02x", b[0])
}

// enveloped is frameLen for a session frame that carries a whole frame
// after its type byte and stream id (OPEN, ON, STREAM).
func enveloped(b []byte, d Dir) (int, error) {
	const head = 1 + 4
	if len(b) <= head {
		return 0, nil
	}
	switch inner := b[head]; {
	case d == Up && b[0] == Open && inner != Acquire && inner != Watch,
		d == Up && b[0] == On && inner != Proclaim,
		d == Down && (inner == Stream || inner == Error || inner == SessionOK || inner == Alive):
		return 0, fmt.Errorf("%s carrying 0x%02x", TypeName(b[0]), inner)
	}
	n, err := frameLen(b[head:], d)
	if n == 0 || err != nil {
		return 0, err
	}
	return head + n, nil
}

// acquireLen is frameLen for an ACQUIRE of version 1, 2 or 3.
func acquireLen(b []byte) (int, error) {
	if len(b) < 2 {
		return 0, nil
	}
	switch b[1] {
	case 1:
		return fieldsLen(b, 2+4, lenField(2))
	case 2:
		return fieldsLen(b, 2+4+1+2, lenField(2))
	case 3:
		return fieldsLen(b, 2+4+1+2, lenField(2), lenField(2))
	}
	return 0, fmt.Errorf("ACQUIRE with version %d", b[1])
}

// lenField is a length field of n bytes (1 or 2) followed by that many
// bytes; fieldsLen takes it as a negative number.
func lenField(n int) int { return -n }

// fieldsLen walks a frame's fields: a positive size is that many bytes, a
// lenField one a length and the bytes it counts. It returns the frame's
// length, or 0 while b is too short to tell.
func fieldsLen(b []byte, fields ...int) (int, error) {
	at := 0
	for _, f := range fields {
		if f >= 0 {
			at += f
			continue
		}
		n := -f
		if len(b) < at+n {
			return 0, nil
		}
		size := int(b[at])
		if n == 2 {
			size = int(binary.BigEndian.Uint16(b[at : at+2]))
		}
		at += n + size
	}
	if len(b) < at {
		return 0, nil
	}
	return at, nil
}

// eventLen is frameLen for an EVENT: its body depends on its kind.
func eventLen(b []byte) (int, error) {
	const head = 1 + 8 + 8 + 1
	if len(b) < head {
		return 0, nil
	}
	who := []int{lenField(1), lenField(2)}               // identity, value
	holder := append([]int{head, 8 + 1 + 2 + 4}, who...) // token, mode, limit, held_back_ms
	waiter := append([]int{head, 8 + 1 + 2}, who...)     // arrival, mode, limit
	switch b[head-1] {
	case 1: // snapshot
		return fieldsLen(b, head+1+4+4+4)
	case 2:
		return fieldsLen(b, holder...)
	case 3, 9: // waiter, queued
		return fieldsLen(b, waiter...)
	case 4: // snapshot end
		return head, nil
	case 5: // granted: arrival, then a holder
		return fieldsLen(b, append([]int{head + 8, 8 + 1 + 2 + 4}, who...)...)
	case 6: // value
		return fieldsLen(b, head+8, lenField(2))
	case 7: // ended
		return fieldsLen(b, head+9)
	case 8: // held back
		return fieldsLen(b, head+13)
	case 10: // left
		return fieldsLen(b, head+8)
	case 11: // blocked
		return fieldsLen(b, head+5)
	}
	return 0, fmt.Errorf("EVENT of unknown kind %d", b[head-1])
}

func decode(f *Frame) {
	switch f.Type {
	case Acquire:
		f.LeaseMS = binary.BigEndian.Uint32(f.Raw[2:6])
		if f.Raw[1] == 1 {
			f.Name = string(f.Raw[8:])
		}
	case Acquired:
		f.Token = binary.BigEndian.Uint64(f.Raw[1:9])
	case Error:
		f.Code = f.Raw[1]
		f.Reason = string(f.Raw[3:])
	}
}

// Frames splits one direction of the chunks into frames. It stops at the
// first byte that cannot start a frame and reports it; a trailing partial
// frame is reported as Partial.
func Frames(chunks []Chunk, d Dir) (frames []Frame, partial []byte, err error) {
	var buf []byte
	for _, c := range chunks {
		if c.Dir != d {
			continue
		}
		buf = append(buf, c.Data...)
		for len(buf) > 0 {
			n, ferr := frameLen(buf, d)
			if ferr != nil {
				return frames, buf, ferr
			}
			if n == 0 {
				break
			}
			f := Frame{At: c.At, Type: buf[0], Raw: append([]byte(nil), buf[:n]...)}
			decode(&f)
			frames = append(frames, f)
			buf = buf[n:]
		}
	}
	return frames, buf, nil
}

// Exchange is one client request and the reply that answered it.
type Exchange struct {
	Send  Frame
	Reply *Frame // nil: never answered
}

// Analysis is the reply accounting of one connection, done by the rules a
// client must follow: every ACQUIRE and HEARTBEAT gets exactly one WAITING
// or ACQUIRED, and while the session is WAITING an ACQUIRED is the
// unsolicited promotion, never an ack.
type Analysis struct {
	Exchanges   []Exchange
	Promotions  []Frame
	Errors      []Frame // ERROR frames sent to the client
	MaxInFlight int     // most requests sent and not yet answered at once
	Heartbeats  []Frame // HEARTBEAT sends, in order
	ClientBytes int
	Problem     string // unparseable bytes, if any
}

// Analyze runs the reply accounting over a record's chunks.
func Analyze(chunks []Chunk) Analysis {
	var a Analysis
	up, _, uerr := Frames(chunks, Up)
	down, _, derr := Frames(chunks, Down)
	if uerr != nil {
		a.Problem = "client sent " + uerr.Error()
	} else if derr != nil {
		a.Problem = "server sent " + derr.Error()
	}
	for _, c := range chunks {
		if c.Dir == Up {
			a.ClientBytes += len(c.Data)
		}
	}
	var pending []int // indexes into a.Exchanges
	waiting := false
	// A session's streams answer nothing of the session's own: only
	// SESSION and HEARTBEAT are its requests, SESSION_OK and ALIVE their
	// replies. Its OPENs, ONs and RELEASEs are each stream's own.
	streamFrame := func(t byte) bool {
		switch t {
		case Open, On, Release, Stream, Released, StreamEnd:
			return true
		}
		return false
	}
	i, j := 0, 0
	for i < len(up) || j < len(down) {
		// Merge by time; on a tie the server frame goes first, which is the
		// causal order (a reply stamped no later than the send it caused).
		if j < len(down) && (i >= len(up) || down[j].At <= up[i].At) {
			f := down[j]
			j++
			if streamFrame(f.Type) {
				continue
			}
			switch f.Type {
			case Waiting:
				waiting = true
			case Acquired:
				if waiting {
					waiting = false
					a.Promotions = append(a.Promotions, f)
					continue
				}
			case Error:
				a.Errors = append(a.Errors, f)
				continue
			case Event:
				continue // a watch's events answer nothing; its WATCHING does
			}
			if len(pending) > 0 {
				fc := f
				a.Exchanges[pending[0]].Reply = &fc
				pending = pending[1:]
			}
			continue
		}
		f := up[i]
		i++
		if streamFrame(f.Type) {
			continue
		}
		a.Exchanges = append(a.Exchanges, Exchange{Send: f})
		pending = append(pending, len(a.Exchanges)-1)
		if len(pending) > a.MaxInFlight {
			a.MaxInFlight = len(pending)
		}
		if f.Type == Heartbeat {
			a.Heartbeats = append(a.Heartbeats, f)
		}
	}
	return a
}

// LastAckedSend returns the send time of the last answered request, and false
// if none was answered.
func (a Analysis) LastAckedSend() (time.Duration, bool) {
	for k := len(a.Exchanges) - 1; k >= 0; k-- {
		if a.Exchanges[k].Reply != nil {
			return a.Exchanges[k].Send.At, true
		}
	}
	return 0, false
}

// LastReply returns the time of the last reply that acknowledged a request.
func (a Analysis) LastReply() (time.Duration, bool) {
	for k := len(a.Exchanges) - 1; k >= 0; k-- {
		if r := a.Exchanges[k].Reply; r != nil {
			return r.At, true
		}
	}
	return 0, false
}
