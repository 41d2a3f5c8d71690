package floor

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// SessionClient is the bare session client for one worker: one session
// (protocol version 4), opened by the first Acquire and kept, and one claim
// at a time on it, each a stream of its own. Acquire sends OPEN and reads
// the STREAM(ACQUIRED); Release sends RELEASE and reads the RELEASED. It
// sends no HEARTBEAT: its cycles are the session's signs of life. Any
// error drops the session, and the next Acquire opens a new one.
type SessionClient struct {
	addr  string
	lease uint32
	d     net.Dialer
	frame []byte

	conn   *net.TCPConn // the session, nil until the first Acquire
	in     *bufio.Reader
	stream uint32 // the last stream id opened on conn

	// cur is conn for the watch, which closes it and sets cur to nil.
	cur       atomic.Pointer[net.TCPConn]
	watched   <-chan struct{}
	stopWatch func() bool
}

// NewSessionClient returns a bare session client of the server at addr,
// whose session asks for lease (rounded to whole milliseconds, at least 1).
func NewSessionClient(addr string, lease time.Duration) *SessionClient {
	ms := min(max(lease.Milliseconds(), 1), int64(^uint32(0)))
	return &SessionClient{addr: addr, lease: uint32(ms), d: net.Dialer{KeepAlive: -1},
		frame: make([]byte, 0, openHeadLen+protocol.MaxNameLen)}
}

// SessionClaim is one granted claim of a bare session client.
type SessionClaim struct {
	c      *SessionClient
	conn   *net.TCPConn
	stream uint32
	Token  uint64
}

// Acquire opens a stream with an ACQUIRE for name and reads its
// STREAM(ACQUIRED), opening the session first if there is none. A WAITING,
// a STREAM_END or an ERROR is an error: the bare client does not queue.
func (c *SessionClient) Acquire(ctx context.Context, name string) (*SessionClaim, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.watch(ctx)
	// A new session when there is none, when the watch closed it (a
	// context that ended), or when its stream ids ran out (never reused).
	if c.conn == nil || c.cur.Load() != c.conn || c.stream == ^uint32(0) {
		if err := c.open(ctx); err != nil {
			return nil, err
		}
	}
	id := c.stream + 1
	frame, err := protocol.AppendAcquire(protocol.AppendStreamHeader(c.frame[:0], protocol.MsgOpen, id), name, c.lease)
	if err != nil {
		return nil, err // the name: nothing was sent, the session stays
	}
	c.frame = frame
	c.stream = id
	token, err := c.exchange(frame, id, true)
	if err != nil {
		return nil, err
	}
	return &SessionClaim{c: c, conn: c.conn, stream: id, Token: token}, nil
}

// Release sends RELEASE and reads the RELEASED: when it returns nil, the
// server has let the lock go.
func (cl *SessionClaim) Release() error {
	c := cl.c
	if c.conn != cl.conn {
		return errors.New("the claim's session has ended")
	}
	var frame [streamHead]byte
	_, err := c.exchange(protocol.AppendStreamHeader(frame[:0], protocol.MsgRelease, cl.stream), cl.stream, false)
	return err
}

// open dials and exchanges SESSION for SESSION_OK.
func (c *SessionClient) open(ctx context.Context) error {
	c.drop()
	// A context that cannot be cancelled keeps net from starting a
	// goroutine per dial; on loopback a connect completes or is refused
	// at once.
	nc, err := c.d.DialContext(context.Background(), "tcp", c.addr)
	if err != nil {
		return err
	}
	c.conn, c.stream = nc.(*net.TCPConn), 0
	if c.in == nil {
		c.in = bufio.NewReader(c.conn)
	} else {
		c.in.Reset(c.conn)
	}
	c.cur.Store(c.conn)
	if err := ctx.Err(); err != nil { // the watch may have run before the Store
		c.drop()
		return err
	}
	hello, err := protocol.AppendSession(c.frame[:0], c.lease)
	if err == nil {
		_, err = c.conn.Write(hello)
	}
	if err == nil {
		var f protocol.SessionFrame
		if f, err = protocol.ReadSessionFrame(c.in); err == nil && f.Type != protocol.MsgSessionOK {
			err = unexpected("SESSION", f)
		}
	}
	if err != nil {
		c.drop()
		return fmt.Errorf("opening the session: %w", err)
	}
	return nil
}

// exchange writes frame and reads the one reply it must get: stream id's
// STREAM(ACQUIRED), whose token it returns, when acquire, else its
// RELEASED. Anything else drops the session.
func (c *SessionClient) exchange(frame []byte, id uint32, acquire bool) (uint64, error) {
	token, err := c.roundTrip(frame, id, acquire)
	if err != nil {
		c.drop()
	}
	return token, err
}

func (c *SessionClient) roundTrip(frame []byte, id uint32, acquire bool) (uint64, error) {
	if _, err := c.conn.Write(frame); err != nil {
		return 0, err
	}
	// The replies the bare client expects are read in place, the part
	// that says what the frame is first (a STREAM(WAITING) is only that
	// long); anything else is read whole, for the error.
	var typ, inner uint8 = protocol.MsgReleased, 0
	head := streamHead
	if acquire {
		typ, inner, head = protocol.MsgStream, protocol.MsgAcquired, streamHead+1
	}
	b, err := c.in.Peek(1) // an ERROR may be shorter than head
	if err != nil {
		return 0, err
	}
	if b[0] == typ {
		b, err = c.in.Peek(head) // a prefix of every frame of type typ
	}
	if err == nil && b[0] == typ && streamID(b) == id && (!acquire || b[streamHead] == inner) {
		if !acquire {
			_, _ = c.in.Discard(head)
			return 0, nil
		}
		if b, err = c.in.Peek(head + 8); err != nil {
			return 0, err
		}
		token := binary.BigEndian.Uint64(b[head:])
		_, _ = c.in.Discard(head + 8)
		return token, nil
	}
	f, err := protocol.ReadSessionFrame(c.in)
	if err != nil {
		return 0, err
	}
	return 0, unexpected(protocol.MsgName(frame[0]), f)
}

// unexpected is the error for reply f to a request.
func unexpected(request string, f protocol.SessionFrame) error {
	switch f.Type {
	case protocol.MsgStream:
		return fmt.Errorf("%s: got STREAM %d (%s)", request, f.Stream, protocol.MsgName(f.Inner))
	case protocol.MsgStreamEnd:
		return fmt.Errorf("%s: got STREAM_END %d, code 0x%02x %q", request, f.Stream, f.Code, f.Reason)
	case protocol.MsgError:
		return fmt.Errorf("%s: got ERROR 0x%02x (%s) %q", request, f.Code, protocol.ErrCodeName(f.Code), f.Reason)
	}
	return fmt.Errorf("%s: got frame type 0x%02x, stream %d", request, f.Type, f.Stream)
}

// drop closes the session, if any.
func (c *SessionClient) drop() {
	if c.conn != nil {
		c.cur.CompareAndSwap(c.conn, nil)
		c.conn.Close()
		c.conn = nil
	}
}

// watch makes the end of ctx close the session. The workload passes the
// same context to every Acquire of a cell, so this registers once per
// cell, not once per claim.
func (c *SessionClient) watch(ctx context.Context) {
	done := ctx.Done()
	if done == nil || done == c.watched {
		return
	}
	if c.stopWatch != nil {
		c.stopWatch()
	}
	c.watched = done
	c.stopWatch = context.AfterFunc(ctx, func() {
		if conn := c.cur.Swap(nil); conn != nil {
			conn.Close()
		}
	})
}

// Close stops the watch and closes the session: the server releases what
// it still holds.
func (c *SessionClient) Close() error {
	if c.stopWatch != nil {
		c.stopWatch()
		c.stopWatch, c.watched = nil, nil
	}
	c.drop()
	return nil
}
