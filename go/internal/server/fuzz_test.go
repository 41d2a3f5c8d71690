package server

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/testspec"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// outcome is what a server must answer to a byte stream from a single
// client: the grant's ACQUIRED and one ACQUIRED per run of heartbeats that
// arrives together (so 1 to heartbeats replies, when there are any), then
// either an ERROR and a close, or nothing more with the connection left
// open.
type outcome struct {
	granted    bool            // a valid ACQUIRE: the first reply is ACQUIRED
	heartbeats int             // heartbeats after the ACQUIRE
	final      *protocol.Error // nil: the connection stays open
	reason     string          // exact reason, when the server adds detail
	leaseMS    uint32          // the granted lease, 0 before a grant
}

// model applies the protocol's rules to data, independently of the server's
// code: it is the specification the fuzz target checks the server against.
func model(data []byte) outcome {
	unknown := func(b byte) outcome {
		return outcome{final: protocol.ErrUnknownMessage, reason: fmt.Sprintf("unknown message type: 0x%02x", b)}
	}
	if len(data) == 0 {
		return outcome{}
	}
	switch data[0] {
	case protocol.MsgAcquire:
	case protocol.MsgHeartbeat:
		return outcome{final: protocol.ErrExpectedAcquire}
	default:
		return unknown(data[0])
	}
	if len(data) < 2 {
		return outcome{}
	}
	// Versions 2 and 3 have mode and limit between the lease and the
	// name_len, checked after the lease and before the name; version 3
	// has a value after the name.
	hdr := 8
	switch data[1] {
	case protocol.Version:
	case protocol.VersionShared, protocol.VersionValue:
		hdr = 11
	default:
		return outcome{final: protocol.ErrUnsupportedVersion}
	}
	if len(data) < 6 {
		return outcome{}
	}
	lease := binary.BigEndian.Uint32(data[2:6])
	if lease == 0 && len(data) >= hdr {
		return outcome{final: protocol.ErrInvalidLease}
	}
	if len(data) < hdr {
		return outcome{}
	}
	if hdr == 11 {
		mode, limit := data[6], binary.BigEndian.Uint16(data[7:9])
		if mode > protocol.ModeShared || (mode == protocol.ModeExclusive && limit != 0) {
			return outcome{final: protocol.ErrInvalidMode}
		}
	}
	nameLen := int(binary.BigEndian.Uint16(data[hdr-2 : hdr]))
	switch {
	case nameLen == 0:
		return outcome{final: protocol.ErrEmptyName}
	case nameLen > protocol.MaxNameLen:
		return outcome{final: protocol.ErrNameTooLong}
	case len(data) < hdr+nameLen:
		return outcome{}
	case !utf8.Valid(data[hdr : hdr+nameLen]):
		return outcome{final: protocol.ErrNameNotUTF8}
	}
	rest := data[hdr+nameLen:]
	v3 := data[1] == protocol.VersionValue
	if v3 {
		value, ok, tooLong := cutValue(rest)
		switch {
		case tooLong:
			return outcome{final: protocol.ErrValueTooLong}
		case !ok:
			return outcome{}
		}
		rest = value
	}
	out := outcome{granted: true, leaseMS: lease}
	for len(rest) > 0 {
		b := rest[0]
		rest = rest[1:]
		switch {
		case b == protocol.MsgHeartbeat:
			out.heartbeats++
		case b == protocol.MsgProclaim && v3:
			after, ok, tooLong := cutValue(rest)
			switch {
			case tooLong:
				out.final = protocol.ErrValueTooLong
				return out
			case !ok:
				return out // a PROCLAIM not all there yet
			}
			out.heartbeats++ // answered as a HEARTBEAT is
			rest = after
		case b == protocol.MsgAcquire:
			out.final = protocol.ErrDuplicateAcquire
			return out
		default:
			u := unknown(b)
			out.final, out.reason = u.final, u.reason
			return out
		}
	}
	return out
}

// cutValue reads a value_len and its value off the front of data: ok when
// both are there, tooLong when the length is over protocol.MaxValueLen
// (answered at the length). It returns what follows the value.
func cutValue(data []byte) (rest []byte, ok, tooLong bool) {
	if len(data) < 2 {
		return nil, false, false
	}
	n := int(binary.BigEndian.Uint16(data))
	if n > protocol.MaxValueLen {
		return nil, false, true
	}
	if len(data) < 2+n {
		return nil, false, false
	}
	return data[2+n:], true, false
}

// FuzzSessionByteStream sends arbitrary bytes, in arbitrary chunks, to a
// server and checks every frame that comes back against model. Without
// -fuzz it runs the seed corpus: every byte vector of the spec and
// testdata/fuzz/FuzzSessionByteStream.
//
// It runs in process: one server for the whole run, each input a session
// over net.Pipe. (A fresh server and a TCP connection per input managed
// about 200 inputs a second; this does thousands.)
func FuzzSessionByteStream(f *testing.F) {
	for _, tc := range loadServerInvalidFrom(f, testspec.Read(f, "vectors/frames.json")).Cases {
		b, err := hex.DecodeString(tc.SendHex)
		require.NoError(f, err)
		f.Add(b, uint8(0))
		f.Add(b, uint8(1))
	}
	valid, _ := protocol.AppendAcquire(nil, "fuzz", 60000)
	f.Add(append(valid, 2, 2, 2, 1, 2), uint8(3))
	shared, _ := protocol.AppendAcquireV2(nil, "fuzz-shared", 60000, protocol.ModeShared, 0)
	f.Add(append(shared, 2, 2, 1), uint8(4))
	f.Add(append(valid, 2, 0x13), uint8(2))
	valued, _ := protocol.AppendAcquireV3(nil, "fuzz-valued", 60000, protocol.ModeExclusive, 0, []byte("v"))
	f.Add(append(valued, 2, 3, 0, 1, 'w', 2), uint8(5))
	f.Add(append(valued, 3, 4, 1), uint8(1))
	f.Add(valid[:5], uint8(0))

	// A block of tokens larger than any run: no reservation, so no grant
	// ever waits for the disk (which would answer WAITING).
	srv, err := New(Config{DataDir: f.TempDir(), tokenBlock: 1 << 40})
	require.NoError(f, err)
	f.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), replyTimeout)
		defer cancel()
		require.NoError(f, srv.Shutdown(ctx))
	})

	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		if len(data) > 8+protocol.MaxNameLen+64 {
			// Longer streams add nothing but time: the longest ACQUIRE and
			// a few frames after it. (The fuzzer minimizes every input that
			// finds new code in time quadratic in its length.)
			return
		}
		want := model(data)
		frames, closed := exchange(t, srv, data, 1+int(chunk%16))
		// A short lease may run out between chunks: then the session
		// ends early, without an ERROR.
		expired := closed && want.leaseMS != 0 && want.leaseMS < 2000 &&
			(len(frames) == 0 || frames[len(frames)-1].Type != protocol.MsgError)

		i := 0
		if want.granted {
			if expired && len(frames) == 0 {
				return
			}
			require.NotEmpty(t, frames, "no grant")
			require.Equal(t, protocol.MsgAcquired, frames[0].Type, "got %v", frames)
			token := frames[0].Token
			for i = 1; i < len(frames) && frames[i].Type == protocol.MsgAcquired; i++ {
				require.Equal(t, token, frames[i].Token)
			}
			replies := i - 1
			require.LessOrEqual(t, replies, want.heartbeats, "more replies than heartbeats: %v", frames)
			if !expired && want.heartbeats > 0 {
				require.Positive(t, replies, "heartbeats without a reply: %v", frames)
			}
		}
		if expired {
			require.Equal(t, len(frames), i, "got %v", frames)
			return
		}
		if want.final == nil {
			require.Equal(t, len(frames), i, "got %v", frames)
			require.False(t, closed, "want an open, quiet connection; it was closed after %v", frames)
			return
		}
		require.Equal(t, i+1, len(frames), "want one ERROR after %d frames, got %v", i, frames)
		got := frames[i]
		require.Equal(t, protocol.MsgError, got.Type, "got %v", got)
		require.Equal(t, want.final.Code, got.Code, "got %v", got)
		if want.reason != "" {
			require.Equal(t, want.reason, got.Reason)
		}
		require.True(t, closed, "the connection stays open after %v", got)
	})
}

// exchange runs data through a new session of srv over net.Pipe, step
// bytes per write, and returns what the server sent: all of it, up to the
// point where the server either closed the connection (closed) or read
// everything and asked for more, with nothing more to say. It returns once
// the session has let go of its lock, so that the next input finds it free.
func exchange(t *testing.T, srv *Server, data []byte, step int) (frames []frame, closed bool) {
	cli, end := net.Pipe()
	conn := &watchedConn{Conn: end, want: len(data), idle: make(chan struct{}), closed: make(chan struct{})}
	srv.startSession(conn)

	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		for i := 0; i < len(data); i += step {
			// The server may stop reading on purpose; it still answers.
			if _, err := cli.Write(data[i:min(i+step, len(data))]); err != nil {
				return
			}
		}
	}()
	read := make(chan error, 1)
	go func() {
		for {
			f, err := readFrame(cli)
			if err != nil {
				read <- err
				return
			}
			frames = append(frames, f)
		}
	}()

	timeout := time.NewTimer(replyTimeout)
	defer timeout.Stop()
	var err error
	select {
	case err = <-read:
		closed = true
	case <-conn.idle:
		// Replies are written before the server reads again, and a write
		// on a pipe returns only once read: everything has arrived.
		cli.Close()
		err = <-read
	case <-timeout.C:
		t.Fatal("the server neither answered nor asked for more")
	}
	cli.Close()
	<-wrote
	select {
	case <-conn.closed:
	case <-timeout.C:
		t.Fatal("the session did not end")
	}
	if closed {
		require.ErrorIs(t, err, io.EOF, "the server must close between frames")
	}
	return frames, closed
}

// watchedConn is the server's end of the pipe. It tells when the server
// reads again after it has read all want bytes (idle), and when the session
// closes the connection, which it does after releasing its claim.
type watchedConn struct {
	net.Conn
	want int

	mu     sync.Mutex
	got    int
	idle   chan struct{}
	closed chan struct{}
	once   [2]sync.Once
}

func (c *watchedConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	if c.got == c.want {
		c.once[0].Do(func() { close(c.idle) })
	}
	c.mu.Unlock()
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.got += n
	c.mu.Unlock()
	return n, err
}

func (c *watchedConn) Close() error {
	c.once[1].Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// readFrame decodes one server frame; io.EOF means a close between frames.
func readFrame(r io.Reader) (frame, error) {
	var typ [1]byte
	if _, err := io.ReadFull(r, typ[:]); err != nil {
		return frame{}, err
	}
	f := frame{Type: typ[0]}
	var err error
	switch f.Type {
	case protocol.MsgWaiting:
	case protocol.MsgAcquired:
		f.Token, err = protocol.ReadAcquiredBody(r)
	case protocol.MsgError:
		f.Code, f.Reason, err = protocol.ReadErrorBody(r)
	default:
		err = fmt.Errorf("server sent unknown message type 0x%02x", f.Type)
	}
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF // a torn frame is never a clean close
	}
	return f, err
}
