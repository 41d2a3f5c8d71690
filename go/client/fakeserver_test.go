package client

// A scripted fake server for exact-byte tests: it accepts connections,
// records every byte the client sends with the time it arrived, and sends
// exactly the bytes a test tells it to, when it tells it to.

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// wait bounds every event-driven wait of the tests: long enough never to
// flake on a loaded machine, short enough that a broken client fails fast.
const wait = 5 * time.Second

type fakeServer struct {
	t     *testing.T
	ln    net.Listener
	conns chan *fakeConn
	// ignoreEOF keeps the server's side open after the client half-closes,
	// like a server that never confirms a release. Set before connecting.
	ignoreEOF atomic.Bool
}

func newFakeServer(t *testing.T) *fakeServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return newFakeServerOn(t, ln)
}

// newFakeServerOn serves on ln, for example a TLS listener.
func newFakeServerOn(t *testing.T, ln net.Listener) *fakeServer {
	s := &fakeServer{t: t, ln: ln, conns: make(chan *fakeConn, 16)}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fc := newFakeConn(t, c)
			fc.ignoreEOF = s.ignoreEOF.Load()
			wg.Add(1)
			go func() { defer wg.Done(); fc.record() }()
			s.conns <- fc
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for {
			select {
			case c := <-s.conns:
				c.c.Close()
				continue
			default:
			}
			break
		}
		wg.Wait()
	})
	return s
}

func (s *fakeServer) addr() string { return s.ln.Addr().String() }

// accept returns the next connection a client made.
func (s *fakeServer) accept() *fakeConn {
	s.t.Helper()
	select {
	case c := <-s.conns:
		s.t.Cleanup(func() { c.c.Close() })
		return c
	case <-time.After(wait):
		s.t.Fatal("no connection from the client")
		return nil
	}
}

// noConnection asserts that no client connects within d.
func (s *fakeServer) noConnection(d time.Duration) {
	s.t.Helper()
	select {
	case c := <-s.conns:
		c.c.Close()
		s.t.Fatalf("unexpected connection from %s", c.c.RemoteAddr())
	case <-time.After(d):
	}
}

type stampedByte struct {
	b  byte
	at time.Time
}

type fakeConn struct {
	t      *testing.T
	c      net.Conn
	in     chan stampedByte // every byte the client sent, in order
	closed chan struct{}    // closed when the client's side ended
	mu     sync.Mutex
	all    []stampedByte

	ignoreEOF bool
}

func newFakeConn(t *testing.T, c net.Conn) *fakeConn {
	return &fakeConn{t: t, c: c, in: make(chan stampedByte, 4096), closed: make(chan struct{})}
}

func (c *fakeConn) record() {
	defer close(c.closed)
	buf := make([]byte, 512)
	for {
		n, err := c.c.Read(buf)
		at := time.Now()
		for _, b := range buf[:n] {
			sb := stampedByte{b, at}
			c.mu.Lock()
			c.all = append(c.all, sb)
			c.mu.Unlock()
			c.in <- sb
		}
		if err != nil {
			if !c.ignoreEOF {
				c.c.Close() // like the real server: the client's end is ours too
			}
			return
		}
	}
}

// next returns the next byte the client sends.
func (c *fakeConn) next() stampedByte {
	c.t.Helper()
	select {
	case b := <-c.in:
		return b
	case <-c.closed:
		select {
		case b := <-c.in:
			return b
		default:
		}
		c.t.Fatal("client closed the connection instead of sending")
	case <-time.After(wait):
		c.t.Fatal("client sent nothing")
	}
	return stampedByte{}
}

// expect reads len(want) bytes and requires them to equal want. It returns
// the arrival time of the last byte.
func (c *fakeConn) expect(want []byte) time.Time {
	c.t.Helper()
	got := make([]byte, len(want))
	var at time.Time
	for i := range want {
		b := c.next()
		got[i], at = b.b, b.at
	}
	require.Equal(c.t, hex.EncodeToString(want), hex.EncodeToString(got))
	return at
}

func (c *fakeConn) expectAcquire(name string, lease time.Duration) time.Time {
	c.t.Helper()
	f, err := protocol.AppendAcquire(nil, name, uint32(lease/time.Millisecond))
	require.NoError(c.t, err)
	return c.expect(f)
}

// expectHeartbeat returns the arrival time of the next byte, a HEARTBEAT.
func (c *fakeConn) expectHeartbeat() time.Time {
	c.t.Helper()
	return c.expect([]byte{protocol.MsgHeartbeat})
}

// quiet asserts that the client sends nothing for d.
func (c *fakeConn) quiet(d time.Duration) {
	c.t.Helper()
	select {
	case b := <-c.in:
		c.t.Fatalf("client sent 0x%02x", b.b)
	case <-time.After(d):
	}
}

// expectClosed waits until the client closes the connection, requiring that
// it sends nothing more first; it returns when the close was seen.
func (c *fakeConn) expectClosed() time.Time {
	c.t.Helper()
	select {
	case <-c.closed:
		select {
		case b := <-c.in:
			c.t.Fatalf("client sent 0x%02x before closing", b.b)
		default:
		}
		return time.Now()
	case b := <-c.in:
		c.t.Fatalf("client sent 0x%02x instead of closing", b.b)
	case <-time.After(wait):
		c.t.Fatal("client did not close the connection")
	}
	return time.Time{}
}

// send writes raw bytes in one write.
func (c *fakeConn) send(b ...[]byte) {
	c.t.Helper()
	_, err := c.c.Write(bytes.Join(b, nil))
	if err != nil && !errors.Is(err, io.EOF) {
		c.t.Logf("fake server write: %v", err)
	}
}

// sendSplit writes b one byte at a time with a pause in between, so that
// every frame arrives in pieces.
func (c *fakeConn) sendSplit(b []byte, pause time.Duration) {
	c.t.Helper()
	for i := range b {
		c.send(b[i : i+1])
		time.Sleep(pause)
	}
}

func waiting() []byte              { return []byte{protocol.MsgWaiting} }
func acquired(token uint64) []byte { return protocol.AppendAcquired(nil, token) }
func errFrame(code uint8, reason string) []byte {
	return protocol.AppendError(nil, code, reason)
}
