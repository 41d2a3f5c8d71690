package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/leaserecord"
	"github.com/monolock/monolock/go/internal/testcerts"
	"github.com/monolock/monolock/go/internal/testspec"
	"github.com/monolock/monolock/go/internal/tokenstore"
	"github.com/monolock/monolock/go/internal/watch"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// sessionPeer is a raw client of a session of streams.
type sessionPeer struct {
	*client
	in *bufio.Reader
}

func dialSession(t *testing.T, addr string, leaseMS uint32) *sessionPeer {
	t.Helper()
	p := &sessionPeer{client: dial(t, addr)}
	p.in = bufio.NewReader(p.conn)
	frame, err := protocol.AppendSession(nil, leaseMS)
	require.NoError(t, err)
	p.send(frame)
	f := p.next()
	require.Equal(t, protocol.MsgSessionOK, f.Type, "got %+v", f)
	return p
}

// next reads the next session frame, failing the test after replyTimeout.
func (p *sessionPeer) next() protocol.SessionFrame {
	p.t.Helper()
	f, err := p.read(replyTimeout)
	require.NoError(p.t, err)
	return f
}

func (p *sessionPeer) read(timeout time.Duration) (protocol.SessionFrame, error) {
	require.NoError(p.t, p.conn.SetReadDeadline(time.Now().Add(timeout)))
	return protocol.ReadSessionFrame(p.in)
}

// expectNothing checks that nothing arrives for d.
func (p *sessionPeer) expectNothing(d time.Duration) {
	p.t.Helper()
	f, err := p.read(d)
	require.True(p.t, errors.Is(err, os.ErrDeadlineExceeded), "expected silence, got %+v (%v)", f, err)
}

// expectEnd checks that the server ends the session: an ERROR with code,
// then the close.
func (p *sessionPeer) expectEnd(code *protocol.Error) {
	p.t.Helper()
	f := p.next()
	require.Equal(p.t, protocol.MsgError, f.Type, "got %+v", f)
	require.Equal(p.t, code.Code, f.Code, "got %+v", f)
	_, err := p.read(replyTimeout)
	require.ErrorIs(p.t, err, io.EOF)
}

func (p *sessionPeer) open(id uint32, name string, leaseMS uint32) {
	p.t.Helper()
	frame, err := protocol.AppendAcquire(protocol.AppendStreamHeader(nil, protocol.MsgOpen, id), name, leaseMS)
	require.NoError(p.t, err)
	p.send(frame)
}

func (p *sessionPeer) release(id uint32) {
	p.send(protocol.AppendStreamHeader(nil, protocol.MsgRelease, id))
}

// expectStream reads the next frame and checks that it is stream id's
// STREAM carrying inner; it returns the frame.
func (p *sessionPeer) expectStream(id uint32, inner uint8) protocol.SessionFrame {
	p.t.Helper()
	f := p.next()
	require.Equal(p.t, protocol.MsgStream, f.Type, "got %+v", f)
	require.Equal(p.t, id, f.Stream, "got %+v", f)
	require.Equal(p.t, inner, f.Inner, "got %+v", f)
	return f
}

var sessionMsgTypes = map[string]uint8{
	"SESSION_OK": protocol.MsgSessionOK, "STREAM": protocol.MsgStream, "RELEASED": protocol.MsgReleased,
	"STREAM_END": protocol.MsgStreamEnd, "ALIVE": protocol.MsgAlive, "ERROR": protocol.MsgError,
	"WAITING": protocol.MsgWaiting, "ACQUIRED": protocol.MsgAcquired, "EVENT": protocol.MsgEvent,
	"WATCHING": protocol.MsgWatching,
}

// TestServerSessionVectors sends every server_invalid_session case of
// spec/vectors/frames.json to a fresh server and checks the replies and
// the close.
func TestServerSessionVectors(t *testing.T) {
	var doc struct {
		Invalid struct {
			Cases []struct {
				Desc    string `json:"desc"`
				SendHex string `json:"send_hex"`
				Replies []struct {
					Type   string  `json:"type"`
					Stream *uint32 `json:"stream"`
					Inner  string  `json:"inner"`
					Code   *uint8  `json:"code"`
					Reason *string `json:"reason"`
				} `json:"replies"`
				Then string `json:"then"`
			} `json:"cases"`
		} `json:"server_invalid_session"`
	}
	testspec.Load(t, "vectors/frames.json", &doc)
	require.NotEmpty(t, doc.Invalid.Cases)
	srv := startServer(t, Config{})
	for _, tc := range doc.Invalid.Cases {
		t.Run(tc.Desc, func(t *testing.T) {
			send, err := hex.DecodeString(tc.SendHex)
			require.NoError(t, err)
			p := &sessionPeer{client: dial(t, srv.addr)}
			p.in = bufio.NewReader(p.conn)
			p.send(send)
			if tc.Replies[0].Type == "ACQUIRED" {
				// A single-claim connection: plain frames.
				p.expectAcquired()
				want := tc.Replies[1]
				f := p.client.next()
				require.Equal(t, protocol.MsgError, f.Type)
				assert.Equal(t, *want.Code, f.Code)
				assert.Equal(t, *want.Reason, f.Reason)
				p.expectClosed()
				return
			}
			for i, want := range tc.Replies {
				f, err := p.read(replyTimeout)
				require.NoError(t, err, "reply %d", i)
				require.Equal(t, sessionMsgTypes[want.Type], f.Type, "reply %d: got %+v", i, f)
				if want.Stream != nil {
					assert.Equal(t, *want.Stream, f.Stream, "reply %d", i)
				}
				if want.Inner != "" {
					assert.Equal(t, sessionMsgTypes[want.Inner], f.Inner, "reply %d: got %+v", i, f)
				}
				if want.Code != nil {
					assert.Equal(t, *want.Code, f.Code, "reply %d: got %+v", i, f)
				}
				if want.Reason != nil {
					assert.Equal(t, *want.Reason, f.Reason, "reply %d", i)
				}
			}
			if tc.Then == "open" {
				p.expectNothing(100 * time.Millisecond)
			} else {
				_, err := p.read(replyTimeout)
				require.ErrorIs(t, err, io.EOF)
			}
		})
	}
}

// Many claims pipelined in one write are all answered, each in its
// stream, and a session's claims on one name queue in the order sent.
func TestSessionPipelinedClaims(t *testing.T) {
	srv := startServer(t, Config{})
	p := dialSession(t, srv.addr, 5000)
	var frames []byte
	const n = 200
	for i := uint32(1); i <= n; i++ {
		var err error
		frames, err = protocol.AppendAcquire(protocol.AppendStreamHeader(frames, protocol.MsgOpen, i), fmt.Sprintf("pipelined/%d", i%100), 5000)
		require.NoError(t, err)
	}
	p.send(frames)
	tokens := map[uint64]bool{}
	state := map[uint32]uint8{}
	for range n {
		f := p.next()
		require.Equal(t, protocol.MsgStream, f.Type)
		state[f.Stream] = f.Inner
		if f.Inner == protocol.MsgAcquired {
			assert.False(t, tokens[f.Token], "token %d twice", f.Token)
			tokens[f.Token] = true
		}
	}
	for i := uint32(1); i <= n; i++ {
		want := protocol.MsgAcquired
		if i > 100 {
			want = protocol.MsgWaiting // the second claim on its name, sent after the first
		}
		assert.Equal(t, want, state[i], "stream %d", i)
	}
	// Releasing the first of a name grants the second, in the same session.
	p.release(1)
	got := map[uint8]protocol.SessionFrame{}
	for range 2 {
		f := p.next()
		got[f.Type] = f
	}
	assert.Equal(t, uint32(1), got[protocol.MsgReleased].Stream)
	assert.Equal(t, uint32(101), got[protocol.MsgStream].Stream)
	assert.Equal(t, protocol.MsgAcquired, got[protocol.MsgStream].Inner)
}

// A RELEASE is answered once the lock is out of the table: another
// connection's claim on the name is granted at once.
func TestSessionReleaseFreesTheLock(t *testing.T) {
	srv := startServer(t, Config{})
	p := dialSession(t, srv.addr, 5000)
	p.open(1, "released", 5000)
	p.expectStream(1, protocol.MsgAcquired)
	p.release(1)
	f := p.next()
	require.Equal(t, protocol.MsgReleased, f.Type)
	other := dial(t, srv.addr)
	other.acquire("released", 5000)
	other.expectAcquired()
}

// A kick of one claim ends that stream only, and its lock goes on; the
// session and its other claims live.
func TestSessionKickEndsOneClaim(t *testing.T) {
	srv := startServer(t, Config{})
	p := dialSession(t, srv.addr, 5000)
	p.open(1, "kick/a", 5000)
	p.expectStream(1, protocol.MsgAcquired)
	p.open(2, "kick/b", 5000)
	p.expectStream(2, protocol.MsgAcquired)
	waiter := dial(t, srv.addr)
	waiter.acquire("kick/a", 5000)
	waiter.expectWaiting()

	id := holderID(t, srv, "kick/a")
	require.True(t, srv.Kick(id))
	f := p.next()
	require.Equal(t, protocol.MsgStreamEnd, f.Type)
	assert.Equal(t, uint32(1), f.Stream)
	assert.Equal(t, protocol.ErrAdminClosed.Code, f.Code)
	waiter.expectAcquired()

	p.send([]byte{protocol.MsgHeartbeat})
	require.Equal(t, protocol.MsgAlive, p.next().Type)
	assert.NotZero(t, holderID(t, srv, "kick/b"), "the other claim lives")
	assert.False(t, srv.Kick(id), "a claim is kicked once")
}

// holderID is the id of the one holder of name.
func holderID(t *testing.T, srv *testServer, name string) uint64 {
	t.Helper()
	for _, l := range srv.Locks() {
		if l.Name == name && len(l.Holders) == 1 {
			return l.Holders[0].Session
		}
	}
	t.Fatalf("no single holder of %q", name)
	return 0
}

// A session that goes silent loses every claim at its lease: none is
// handed over before the lease after its last frame.
func TestSessionSilentClaimsExpireAtTheLease(t *testing.T) {
	srv := startServer(t, Config{})
	const lease = 300 * time.Millisecond
	p := dialSession(t, srv.addr, uint32(lease.Milliseconds()))
	last := time.Now() // the OPEN, the session's last frame, goes after this
	p.open(1, "silent/a", uint32(lease.Milliseconds()))
	p.expectStream(1, protocol.MsgAcquired)
	waiter := dial(t, srv.addr)
	waiter.acquire("silent/a", 5000)
	waiter.expectWaiting()
	waiter.expectAcquired()
	assert.GreaterOrEqual(t, time.Since(last), lease, "granted before the silent session's lease ran out")
}

// Closing a session's connection (FIN) releases its claims at once.
func TestSessionCloseReleases(t *testing.T) {
	srv := startServer(t, Config{})
	p := dialSession(t, srv.addr, 60000)
	p.open(1, "closed", 60000)
	p.expectStream(1, protocol.MsgAcquired)
	waiter := dial(t, srv.addr)
	waiter.acquire("closed", 5000)
	waiter.expectWaiting()
	require.NoError(t, p.conn.CloseWrite())
	start := time.Now()
	waiter.expectAcquired()
	assert.Less(t, time.Since(start), 30*time.Second, "released at the close, not at the lease")
}

// A reset session's claims are held until the lease after its last
// frame, not handed over at the reset.
func TestSessionResetHoldsTheClaims(t *testing.T) {
	srv := startServer(t, Config{})
	const lease = 400 * time.Millisecond
	p := dialSession(t, srv.addr, uint32(lease.Milliseconds()))
	last := time.Now()
	p.open(1, "reset", uint32(lease.Milliseconds()))
	p.expectStream(1, protocol.MsgAcquired)
	waiter := dial(t, srv.addr)
	waiter.acquire("reset", 5000)
	waiter.expectWaiting()
	require.NoError(t, p.conn.SetLinger(0))
	require.NoError(t, p.conn.Close()) // RST
	waiter.expectAcquired()
	assert.GreaterOrEqual(t, time.Since(last), lease, "a reset handed the lock over before the lease")
}

// A session over its cap of streams gets STREAM_END 0x05 for the OPEN
// too many; it lives on, and opens again once a stream ended.
func TestSessionStreamCap(t *testing.T) {
	srv := startServer(t, Config{MaxStreams: 2})
	p := dialSession(t, srv.addr, 5000)
	p.open(1, "cap/1", 5000)
	p.open(2, "cap/2", 5000)
	p.open(3, "cap/3", 5000)
	got := p.byStream(3)
	assert.Equal(t, protocol.MsgAcquired, got[1].Inner)
	assert.Equal(t, protocol.MsgAcquired, got[2].Inner)
	require.Equal(t, protocol.MsgStreamEnd, got[3].Type)
	assert.Equal(t, protocol.ErrTooManyStreams.Code, got[3].Code)
	p.release(1)
	require.Equal(t, protocol.MsgReleased, p.next().Type)
	p.open(4, "cap/3", 5000)
	p.expectStream(4, protocol.MsgAcquired)
}

// Every stream counts against the per-address limit, as a connection
// does.
func TestSessionStreamsCountAgainstTheLimits(t *testing.T) {
	srv := startServer(t, Config{MaxSessionsPerAddr: 3})
	p := dialSession(t, srv.addr, 5000) // one place
	p.open(1, "limit/1", 5000)          // two
	p.open(2, "limit/2", 5000)          // three
	p.open(3, "limit/3", 5000)          // refused
	got := p.byStream(3)
	assert.Equal(t, protocol.MsgAcquired, got[1].Inner)
	assert.Equal(t, protocol.MsgAcquired, got[2].Inner)
	require.Equal(t, protocol.MsgStreamEnd, got[3].Type)
	assert.Equal(t, protocol.ErrTooManyStreams.Code, got[3].Code)
	assert.Contains(t, got[3].Reason, "session limit")
}

// byStream reads n frames, one per stream: streams are answered each in
// order, not in the order of their OPENs.
func (p *sessionPeer) byStream(n int) map[uint32]protocol.SessionFrame {
	p.t.Helper()
	got := map[uint32]protocol.SessionFrame{}
	for range n {
		f := p.next()
		_, twice := got[f.Stream]
		require.False(p.t, twice, "stream %d answered twice: %+v", f.Stream, f)
		got[f.Stream] = f
	}
	return got
}

// A session's watch that reads too slowly is cut off with STREAM_END
// 0x04; the session and its claims live on. The session is an in-memory
// pipe, which buffers nothing: the watch's queue passes its bound however
// the machine's sockets are tuned.
func TestSessionSlowWatchIsCutNotTheSession(t *testing.T) {
	srv := startServer(t, Config{})
	p := dialPipeSession(t, srv.Server, 60000)
	frame, err := protocol.AppendWatch(protocol.AppendStreamHeader(nil, protocol.MsgOpen, 1), protocol.Watch{Name: "slow-watch", LeaseMS: 60000})
	require.NoError(t, err)
	p.send(frame)
	p.expectStream(1, protocol.MsgEvent)
	p.expectStream(1, protocol.MsgEvent)
	p.expectStream(1, protocol.MsgWatching)
	p.open(2, "slow-watch-claim", 60000)
	p.expectStream(2, protocol.MsgAcquired)
	// The peer stops reading; a holder of the watched name proclaims
	// values until the watch's queue passes its bound (1 MiB), quickly:
	// well within the write timeout that would cut the session.
	holder := dial(t, srv.addr)
	acq, err := protocol.AppendAcquireV3(nil, "slow-watch", 60000, protocol.ModeExclusive, 0, []byte("v"))
	require.NoError(t, err)
	holder.send(acq)
	holder.expectAcquired()
	proclaim, err := protocol.AppendProclaim(nil, make([]byte, protocol.MaxValueLen))
	require.NoError(t, err)
	for range 2 * watchQueueLimit / protocol.MaxValueLen {
		holder.send(proclaim)
		holder.expectAcquired()
	}
	// Now read: events, then the watch's STREAM_END 0x04; the claim lives.
	for {
		f := p.next()
		if f.Type == protocol.MsgStreamEnd {
			assert.Equal(t, uint32(1), f.Stream)
			assert.Equal(t, protocol.ErrWatcherBehind.Code, f.Code)
			break
		}
		require.Equal(t, protocol.MsgStream, f.Type, "got %+v", f)
	}
	p.send([]byte{protocol.MsgHeartbeat})
	require.Equal(t, protocol.MsgAlive, p.next().Type)
	assert.NotZero(t, holderID(t, srv, "slow-watch-claim"))
	assert.Zero(t, watchersOf(srv, "slow-watch"))
}

const watchQueueLimit = watch.QueueLimit

// pipePeer is a session over an in-memory pipe to srv.
type pipePeer struct {
	t    *testing.T
	conn net.Conn
	in   *bufio.Reader
}

// dialPipeSession serves srv on a pipe of its own and opens a session
// over it.
func dialPipeSession(t *testing.T, srv *Server, leaseMS uint32) *pipePeer {
	t.Helper()
	ln := &pipeListener{conns: make(chan net.Conn, 1), done: make(chan struct{})}
	go func() { _ = srv.Serve(ln) }()
	client, server := net.Pipe()
	t.Cleanup(func() { client.Close() })
	ln.conns <- server
	p := &pipePeer{t: t, conn: client, in: bufio.NewReader(client)}
	frame, err := protocol.AppendSession(nil, leaseMS)
	require.NoError(t, err)
	p.send(frame)
	require.Equal(t, protocol.MsgSessionOK, p.next().Type)
	return p
}

// send writes b from a goroutine of its own: a pipe's write waits for the
// server to read, and the server may be writing to us meanwhile.
func (p *pipePeer) send(b []byte) {
	go func() {
		_ = p.conn.SetWriteDeadline(time.Now().Add(replyTimeout))
		_, _ = p.conn.Write(b)
	}()
}

func (p *pipePeer) next() protocol.SessionFrame {
	p.t.Helper()
	require.NoError(p.t, p.conn.SetReadDeadline(time.Now().Add(replyTimeout)))
	f, err := protocol.ReadSessionFrame(p.in)
	require.NoError(p.t, err)
	return f
}

func (p *pipePeer) open(id uint32, name string, leaseMS uint32) {
	p.t.Helper()
	frame, err := protocol.AppendAcquire(protocol.AppendStreamHeader(nil, protocol.MsgOpen, id), name, leaseMS)
	require.NoError(p.t, err)
	p.send(frame)
}

func (p *pipePeer) expectStream(id uint32, inner uint8) {
	p.t.Helper()
	f := p.next()
	require.Equal(p.t, protocol.MsgStream, f.Type, "got %+v", f)
	require.Equal(p.t, id, f.Stream, "got %+v", f)
	require.Equal(p.t, inner, f.Inner, "got %+v", f)
}

// watchersOf is how many watchers the listing counts on name.
func watchersOf(srv *testServer, name string) int {
	for _, l := range srv.LockListing() {
		if l.Name == name {
			return l.Watchers
		}
	}
	return 0
}

// A session whose client stops reading while its claims' frames pile up
// is cut, and its claims are held back until the lease after its last
// frame: never handed over at the cut. The connection is an in-memory
// pipe, which buffers nothing: the server's writes block at once, however
// the machine's sockets are tuned.
func TestSessionThatStopsReadingIsCutAndHeld(t *testing.T) {
	srv, err := New(Config{DataDir: t.TempDir()})
	require.NoError(t, err)
	ln := &pipeListener{conns: make(chan net.Conn, 1), done: make(chan struct{})}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		require.NoError(t, srv.Shutdown(context.Background()))
		require.NoError(t, <-served)
	})
	client, server := net.Pipe()
	t.Cleanup(func() { client.Close() })
	ln.conns <- server
	const leaseMS = 30000
	in := bufio.NewReader(client)
	frame, err := protocol.AppendSession(nil, leaseMS)
	require.NoError(t, err)
	frame, err = protocol.AppendAcquire(protocol.AppendStreamHeader(frame, protocol.MsgOpen, 1), "cut/held", leaseMS)
	require.NoError(t, err)
	go func() { _, _ = client.Write(frame) }()
	for _, want := range []uint8{protocol.MsgSessionOK, protocol.MsgStream} {
		f, err := protocol.ReadSessionFrame(in)
		require.NoError(t, err)
		require.Equal(t, want, f.Type)
	}
	var held uint64
	require.Eventually(t, func() bool { held = holderIDOf(srv, "cut/held"); return held != 0 }, replyTimeout, time.Millisecond)
	// Claims taken and released, never read: the writer blocks on its
	// first write, and the frames pile up until the session is cut.
	deadline := time.Now().Add(time.Minute)
	require.NoError(t, client.SetWriteDeadline(deadline))
	id := uint32(1)
	for srv.Sessions() == 1 {
		var batch []byte
		for range 100 {
			id++
			batch, _ = protocol.AppendAcquire(protocol.AppendStreamHeader(batch, protocol.MsgOpen, id), "cut/cycle", leaseMS)
			batch = protocol.AppendStreamHeader(batch, protocol.MsgRelease, id)
		}
		if _, err := client.Write(batch); err != nil {
			require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "the session was never cut")
			break // cut: the server closed its end
		}
	}
	require.Eventually(t, func() bool { return srv.Sessions() == 0 }, replyTimeout, time.Millisecond)
	until, ok := srv.HeldBackUntil(held)
	require.True(t, ok, "the cut session's claim was handed over at the cut")
	assert.Greater(t, time.Until(until), leaseMS*time.Millisecond/2)
}

// holderIDOf is the id of the one holder of name, 0 if none.
func holderIDOf(srv *Server, name string) uint64 {
	for _, l := range srv.Locks() {
		if l.Name == name && len(l.Holders) == 1 {
			return l.Holders[0].Session
		}
	}
	return 0
}

// pipeListener hands the server in-memory connections.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// Over TLS a claim is released by the client's close_notify; a FIN
// without one (which anyone on the path can inject) holds it until the
// lease after the last frame, as a reset does: on a session and on a
// single-claim connection alike.
func TestClaimOverTLSReleasedOnlyByCloseNotify(t *testing.T) {
	cert, pool := testcerts.LoopbackServer(t)
	srv := startServerOn(t, Config{}, func(ln net.Listener) net.Listener {
		return NewTLSListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
	})
	const leaseMS = 60000
	// claim sends frame (the claim of name, as the shape sends it) and
	// reads its grant with read.
	claim := func(name string, frame []byte, read func(in *bufio.Reader)) (*tls.Conn, *net.TCPConn) {
		raw, err := net.Dial("tcp", srv.addr)
		require.NoError(t, err)
		t.Cleanup(func() { raw.Close() })
		conn := tls.Client(raw, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13, ServerName: "127.0.0.1"})
		require.NoError(t, conn.SetDeadline(time.Now().Add(replyTimeout)))
		_, err = conn.Write(frame)
		require.NoError(t, err)
		read(bufio.NewReader(conn))
		return conn, raw.(*net.TCPConn)
	}
	shapes := map[string]func(name string) (*tls.Conn, *net.TCPConn){
		"session": func(name string) (*tls.Conn, *net.TCPConn) {
			frame, err := protocol.AppendSession(nil, leaseMS)
			require.NoError(t, err)
			frame, err = protocol.AppendAcquire(protocol.AppendStreamHeader(frame, protocol.MsgOpen, 1), name, leaseMS)
			require.NoError(t, err)
			return claim(name, frame, func(in *bufio.Reader) {
				f, err := protocol.ReadSessionFrame(in)
				require.NoError(t, err)
				require.Equal(t, protocol.MsgSessionOK, f.Type)
				f, err = protocol.ReadSessionFrame(in)
				require.NoError(t, err)
				require.Equal(t, protocol.MsgAcquired, f.Inner)
			})
		},
		"single claim": func(name string) (*tls.Conn, *net.TCPConn) {
			frame, err := protocol.AppendAcquire(nil, name, leaseMS)
			require.NoError(t, err)
			return claim(name, frame, func(in *bufio.Reader) {
				b, err := in.ReadByte()
				require.NoError(t, err)
				require.Equal(t, protocol.MsgAcquired, b)
			})
		},
	}
	for shape, open := range shapes {
		t.Run(shape, func(t *testing.T) {
			name := "tls/close-notify/" + shape
			conn, _ := open(name)
			id := holderID(t, srv, name)
			require.NoError(t, conn.Close()) // close_notify, then FIN
			require.Eventually(t, func() bool { return !holds(srv, name) }, replyTimeout, time.Millisecond)
			_, held := srv.HeldBackUntil(id)
			assert.False(t, held, "a close_notify releases")

			name = "tls/bare-fin/" + shape
			_, raw := open(name)
			id = holderID(t, srv, name)
			require.NoError(t, raw.CloseWrite()) // FIN, no close_notify
			require.Eventually(t, func() bool { _, held := srv.HeldBackUntil(id); return held }, replyTimeout, time.Millisecond,
				"a FIN without close_notify must hold the claim back, not release it")
		})
	}
}

// holds reports whether name has a holder that is not held back.
func holds(srv *testServer, name string) bool {
	for _, l := range srv.Locks() {
		if l.Name == name {
			for _, h := range l.Holders {
				if _, held := srv.HeldBackUntil(h.Session); !held {
					return true
				}
			}
		}
	}
	return false
}

// stallingStore is a lease record's store whose writes wait while stalled:
// a disk that takes its time over an fsync.
type stallingStore struct {
	stalled atomic.Bool
	resume  chan struct{}
}

func (s *stallingStore) Load() (time.Duration, map[string]time.Duration, error) { return 0, nil, nil }
func (s *stallingStore) WantsFull() bool                                        { return true }
func (s *stallingStore) Close()                                                 {}
func (s *stallingStore) Write(leaserecord.Change) error {
	if s.stalled.Load() {
		<-s.resume
	}
	return nil
}

// A claim whose lease must first be written to the lease record waits for
// the write off the session's reader: meanwhile the session's heartbeats
// are answered, and its claims are granted once the write is done. A
// claim whose lease is on record already is admitted by the reader itself.
func TestSessionRecordWriteStallsOnlyItsClaims(t *testing.T) {
	store := &stallingStore{resume: make(chan struct{})}
	rec, err := leaserecord.OpenStore(store, leaserecord.Options{LazyWrite: 20 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(rec.Close)
	tokens, err := tokenstore.New(0, func(uint64) error { return nil }, tokenstore.Options{})
	require.NoError(t, err)
	srv := startServer(t, Config{Gate: recordGate{rec}, Tokens: tokens})
	require.Eventually(t, srv.Server.Ready, replyTimeout, 10*time.Millisecond, "serving")

	p := dialSession(t, srv.addr, 5000)
	store.stalled.Store(true)
	resume := sync.OnceFunc(func() { store.stalled.Store(false); close(store.resume) })
	t.Cleanup(resume)    // a failed check must not leave the record's close waiting
	p.open(1, "a", 5000) // its 5 s lease is on no record yet
	p.open(2, "b", 5000)
	p.send([]byte{protocol.MsgHeartbeat})
	require.Equal(t, protocol.MsgAlive, p.next().Type, "the heartbeat is answered while the write waits")
	p.expectNothing(100 * time.Millisecond)

	resume()
	p.expectStream(1, protocol.MsgAcquired)
	p.expectStream(2, protocol.MsgAcquired)
	assert.True(t, rec.AdmitsAtOnce(5*time.Second), "the lease is on record now")
	p.open(3, "c", 5000)
	p.expectStream(3, protocol.MsgAcquired)
}
