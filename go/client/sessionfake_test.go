package client

// A scripted fake server that speaks version 4 frames, for tests of the
// session's shell that the real server cannot script (exact replies,
// silence, an ERROR at a chosen moment).

import (
	"bufio"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// fakeSessionConn is one session connection as the fake server sees it.
type fakeSessionConn struct {
	t      *testing.T
	c      net.Conn
	frames chan clientFrame
}

// clientFrame is one frame a client sent on a session.
type clientFrame struct {
	typ     uint8
	stream  uint32
	leaseMS uint32           // SESSION
	acquire protocol.Acquire // OPEN
	value   []byte           // ON
	at      time.Time
	err     error // the reading ended
}

// acceptSession takes the next connection of srv and reads its frames.
func acceptSession(t *testing.T, srv *fakeServer) *fakeSessionConn {
	t.Helper()
	fc := srv.accept()
	return newFakeSessionConn(t, fc)
}

// newFakeSessionConn parses what fc recorded as session frames.
func newFakeSessionConn(t *testing.T, fc *fakeConn) *fakeSessionConn {
	pr, pw := io.Pipe()
	go func() {
		defer pw.Close()
		for {
			select {
			case b := <-fc.in:
				if _, err := pw.Write([]byte{b.b}); err != nil {
					return
				}
			case <-fc.closed:
				for {
					select {
					case b := <-fc.in:
						if _, err := pw.Write([]byte{b.b}); err != nil {
							return
						}
					default:
						return
					}
				}
			}
		}
	}()
	s := &fakeSessionConn{t: t, c: fc.c, frames: make(chan clientFrame, 256)}
	go s.parse(bufio.NewReader(pr))
	return s
}

func (s *fakeSessionConn) parse(r *bufio.Reader) {
	defer close(s.frames)
	for {
		var f clientFrame
		var err error
		f.typ, err = r.ReadByte()
		f.at = time.Now()
		if err == nil {
			switch f.typ {
			case protocol.MsgSession:
				f.leaseMS, err = protocol.ReadSessionBody(r)
			case protocol.MsgHeartbeat:
			case protocol.MsgRelease:
				f.stream, err = protocol.ReadStreamID(r)
			case protocol.MsgOpen:
				if f.stream, err = protocol.ReadStreamID(r); err == nil {
					if _, err = r.ReadByte(); err == nil {
						f.acquire, err = protocol.ReadAcquire(r)
					}
				}
			case protocol.MsgOn:
				if f.stream, err = protocol.ReadStreamID(r); err == nil {
					if _, err = r.ReadByte(); err == nil {
						f.value, err = protocol.ReadProclaimBody(r)
					}
				}
			default:
				err = io.ErrUnexpectedEOF
			}
		}
		f.err = err
		s.frames <- f
		if err != nil {
			return
		}
	}
}

// next returns the next frame the client sent, skipping heartbeats
// unless want is MsgHeartbeat; skipped heartbeats are answered ALIVE.
func (s *fakeSessionConn) next(want uint8) clientFrame {
	s.t.Helper()
	for {
		select {
		case f := <-s.frames:
			require.NoError(s.t, f.err)
			if f.typ == protocol.MsgHeartbeat && want != protocol.MsgHeartbeat {
				s.send([]byte{protocol.MsgAlive})
				continue
			}
			require.Equal(s.t, want, f.typ, "frame type")
			return f
		case <-time.After(wait):
			s.t.Fatalf("no frame 0x%02x from the client", want)
			return clientFrame{}
		}
	}
}

// ended waits for the client's side to end (its close or half-close).
func (s *fakeSessionConn) ended() {
	s.t.Helper()
	for {
		select {
		case f, ok := <-s.frames:
			if !ok || f.err != nil {
				return
			}
		case <-time.After(wait):
			s.t.Fatal("the client did not close")
		}
	}
}

func (s *fakeSessionConn) send(frames ...[]byte) {
	for _, f := range frames {
		_, err := s.c.Write(f)
		if err != nil {
			return
		}
	}
}

func sessionOK(max uint32) []byte { return protocol.AppendSessionOK(nil, max) }

func streamWaiting(id uint32) []byte {
	return append(protocol.AppendStreamHeader(nil, protocol.MsgStream, id), protocol.MsgWaiting)
}

func streamAcquired(id uint32, token uint64) []byte {
	b := protocol.AppendStreamHeader(nil, protocol.MsgStream, id)
	return protocol.AppendAcquired(b, token)
}

func streamReleased(id uint32) []byte {
	return protocol.AppendStreamHeader(nil, protocol.MsgReleased, id)
}

// fakeSession opens a session against a fake server and returns both
// sides, the SESSION answered.
func fakeSession(t *testing.T, lease time.Duration, opts ...Option) (*Session, *fakeSessionConn) {
	t.Helper()
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), lease, opts...)
	type res struct {
		s   *Session
		err error
	}
	ch := make(chan res, 1)
	go func() {
		s, err := c.Session(context.Background())
		ch <- res{s, err}
	}()
	conn := acceptSession(t, srv)
	f := conn.next(protocol.MsgSession)
	require.Equal(t, uint32(lease/time.Millisecond), f.leaseMS)
	conn.send(sessionOK(100))
	r := <-ch
	require.NoError(t, r.err)
	t.Cleanup(func() { r.s.Close() })
	return r.s, conn
}
