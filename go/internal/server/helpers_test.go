package server

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/monolock/monolock/go/pkg/protocol"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// replyTimeout bounds every wait for a frame the server owes us. It is far
// above any expected latency: it only turns a hang into a failure.
const replyTimeout = 10 * time.Second

// testServer is a real Server on a loopback port.
type testServer struct {
	*Server
	addr string
	dir  string
}

// startServer runs a server on 127.0.0.1:0 until the test ends.
func startServer(tb testing.TB, cfg Config) *testServer {
	tb.Helper()
	return startServerOn(tb, cfg, nil)
}

// startServerOn is startServer serving through wrap(listener) (TLS, a
// recording listener) when wrap is not nil; addr stays the TCP address.
func startServerOn(tb testing.TB, cfg Config, wrap func(net.Listener) net.Listener) *testServer {
	tb.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = tb.TempDir()
	}
	srv, err := New(cfg)
	require.NoError(tb, err)
	addr, served := serveLoopback(tb, srv, wrap)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		require.NoError(tb, srv.Shutdown(ctx))
		require.NoError(tb, <-served)
	})
	return &testServer{Server: srv, addr: addr, dir: cfg.DataDir}
}

// serveLoopback runs srv on a fresh 127.0.0.1 port, through wrap when it is
// not nil, and returns the port's address and the channel Serve's result
// arrives on. Stopping srv is up to the caller.
func serveLoopback(tb testing.TB, srv *Server, wrap func(net.Listener) net.Listener) (string, <-chan error) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	addr := ln.Addr().String()
	if wrap != nil {
		ln = wrap(ln)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	return addr, served
}

// client is a raw protocol peer: it writes exact bytes and decodes replies.
type client struct {
	t    *testing.T
	conn *net.TCPConn
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, replyTimeout)
	require.NoError(t, err)
	tc := c.(*net.TCPConn)
	require.NoError(t, tc.SetNoDelay(true))
	t.Cleanup(func() { tc.Close() })
	return &client{t: t, conn: tc}
}

func (c *client) send(b []byte) {
	c.t.Helper()
	require.NoError(c.t, c.conn.SetWriteDeadline(time.Now().Add(replyTimeout)))
	_, err := c.conn.Write(b)
	require.NoError(c.t, err)
}

// sendSplit writes b one byte per write, pausing between writes so that the
// server sees each byte in its own read.
func (c *client) sendSplit(b []byte) {
	c.t.Helper()
	for i := range b {
		c.send(b[i : i+1])
		time.Sleep(2 * time.Millisecond)
	}
}

func acquireFrame(t *testing.T, name string, leaseMS uint32) []byte {
	t.Helper()
	b, err := protocol.AppendAcquire(nil, name, leaseMS)
	require.NoError(t, err)
	return b
}

func (c *client) acquire(name string, leaseMS uint32) {
	c.t.Helper()
	c.send(acquireFrame(c.t, name, leaseMS))
}

func (c *client) heartbeat() { c.t.Helper(); c.send([]byte{protocol.MsgHeartbeat}) }

// frame is one decoded server frame.
type frame struct {
	Type   uint8
	Token  uint64
	Code   uint8
	Reason string
}

func (f frame) String() string {
	switch f.Type {
	case protocol.MsgAcquired:
		return fmt.Sprintf("ACQUIRED(%d)", f.Token)
	case protocol.MsgError:
		return fmt.Sprintf("ERROR(0x%02x %q)", f.Code, f.Reason)
	}
	return protocol.MsgName(f.Type)
}

// read returns the next frame, or the error that ended the read: io.EOF for
// a clean close, a timeout error after d.
func (c *client) read(d time.Duration) (frame, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(d))
	var typ [1]byte
	if _, err := io.ReadFull(c.conn, typ[:]); err != nil {
		return frame{}, err
	}
	f := frame{Type: typ[0]}
	var err error
	switch f.Type {
	case protocol.MsgWaiting:
	case protocol.MsgAcquired:
		f.Token, err = protocol.ReadAcquiredBody(c.conn)
	case protocol.MsgError:
		f.Code, f.Reason, err = protocol.ReadErrorBody(c.conn)
	default:
		err = fmt.Errorf("server sent unknown message type 0x%02x", f.Type)
	}
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF // a torn frame is never a clean close
	}
	return f, err
}

// next returns the next frame, failing the test if none comes.
func (c *client) next() frame {
	c.t.Helper()
	f, err := c.read(replyTimeout)
	require.NoError(c.t, err, "waiting for a frame")
	return f
}

func (c *client) expectWaiting() {
	c.t.Helper()
	f := c.next()
	require.Equal(c.t, protocol.MsgWaiting, f.Type, "got %v", f)
}

func (c *client) expectAcquired() uint64 {
	c.t.Helper()
	f := c.next()
	require.Equal(c.t, protocol.MsgAcquired, f.Type, "got %v", f)
	require.NotZero(c.t, f.Token)
	return f.Token
}

// expectGranted is expectAcquired for an ACQUIRE that may first be queued:
// a restarted server answers WAITING until the previous run's leases have
// run out, then promotes.
func (c *client) expectGranted() uint64 {
	c.t.Helper()
	f := c.next()
	if f.Type == protocol.MsgWaiting {
		f = c.next()
	}
	require.Equal(c.t, protocol.MsgAcquired, f.Type, "got %v", f)
	require.NotZero(c.t, f.Token)
	return f.Token
}

func (c *client) expectError(code *protocol.Error) frame {
	c.t.Helper()
	f := c.next()
	require.Equal(c.t, protocol.MsgError, f.Type, "got %v", f)
	require.Equal(c.t, code.Code, f.Code, "got %v", f)
	return f
}

// expectClosed asserts that the server closed the connection with nothing
// more to read.
func (c *client) expectClosed() {
	c.t.Helper()
	f, err := c.read(replyTimeout)
	require.Truef(c.t, isClosed(err), "want close, got frame %v, err %v", f, err)
}

func isClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}

// expectSilence asserts that nothing arrives within d and the connection
// stays open.
func (c *client) expectSilence(d time.Duration) {
	c.t.Helper()
	f, err := c.read(d)
	require.Truef(c.t, errors.Is(err, os.ErrDeadlineExceeded), "want silence, got frame %v, err %v", f, err)
}

// holderOf returns the session id holding name, failing if nobody does.
func holderOf(t *testing.T, srv *testServer, name string) uint64 {
	t.Helper()
	for _, l := range srv.Locks() {
		if l.Name == name && l.Holder != nil {
			return l.Holder.Session
		}
	}
	t.Fatalf("nobody holds %q", name)
	return 0
}

// waitersOf returns the queued session ids of name.
func waitersOf(srv *testServer, name string) []uint64 {
	var ids []uint64
	for _, l := range srv.Locks() {
		if l.Name == name {
			for _, w := range l.Waiters {
				ids = append(ids, w.Session)
			}
		}
	}
	return ids
}

func be64(b []byte) uint64 { return binary.BigEndian.Uint64(b) }

// holdLongAndShort takes the locks "long" and "short" at addr with those
// leases, and keeps the short one's holder alive with three heartbeats: two
// live holders when the test then crashes the server.
func holdLongAndShort(t *testing.T, addr string, long, short time.Duration) {
	t.Helper()
	l := dial(t, addr)
	l.acquire("long", uint32(long.Milliseconds()))
	l.expectAcquired()
	s := dial(t, addr)
	s.acquire("short", uint32(short.Milliseconds()))
	tok := s.expectAcquired()
	for range 3 {
		time.Sleep(short / 4)
		s.heartbeat()
		require.Equal(t, tok, s.expectAcquired())
	}
}
