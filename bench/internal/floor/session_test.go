package floor

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Session frames of docs/protocol.md, written out byte by byte rather than
// built with pkg/protocol: SESSION with a 10 s lease, its SESSION_OK (the
// default 10,000 streams), OPEN of stream 1 with abcFrame, STREAM(ACQUIRED)
// of stream 1 with token tok, RELEASE and RELEASED of stream 1.
var (
	sessionFrame   = []byte{0x05, 0x04, 0x00, 0x00, 0x27, 0x10}
	sessionOKFrame = []byte{0x16, 0x00, 0x00, 0x27, 0x10}
	open1Frame     = append([]byte{0x06, 0, 0, 0, 1}, abcFrame...)
	release1Frame  = []byte{0x08, 0, 0, 0, 1}
	released1Frame = []byte{0x18, 0, 0, 0, 1}
)

func acquired1(tok byte) []byte { return []byte{0x17, 0, 0, 0, 1, 0x12, 0, 0, 0, 0, 0, 0, 0, tok} }

// openFrame is OPEN of stream id for abcFrame.
func openFrame(id byte) []byte { return append([]byte{0x06, 0, 0, 0, id}, abcFrame...) }

// TestSessionServerExchangeBytes: a session whose frames arrive in pieces
// gets SESSION_OK, STREAM(ACQUIRED) with tokens 1, 2, ..., RELEASED and
// ALIVE, and nothing else.
func TestSessionServerExchangeBytes(t *testing.T) {
	c := dial(t, startServer(t))
	send := func(frame []byte) {
		t.Helper()
		cut := min(3, len(frame))
		for _, part := range [][]byte{frame[:1], frame[1:cut], frame[cut:]} {
			if _, err := c.Write(part); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	expect := func(what string, want []byte) {
		t.Helper()
		got := make([]byte, len(want))
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: got %x (%v), want %x", what, got, err, want)
		}
	}
	send(sessionFrame)
	expect("SESSION_OK", sessionOKFrame)
	send(open1Frame)
	expect("STREAM(ACQUIRED)", acquired1(1))
	send(release1Frame)
	expect("RELEASED", released1Frame)
	send([]byte{0x02})
	expect("ALIVE", []byte{0x1a})
	send(openFrame(2))
	expect("STREAM(ACQUIRED) of stream 2", []byte{0x17, 0, 0, 0, 2, 0x12, 0, 0, 0, 0, 0, 0, 0, 2})
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if got, eof := readAll(t, c, 5*time.Second); len(got) != 0 || !eof {
		t.Fatalf("after the half-close: %x (eof %v), want the server's close and nothing else", got, eof)
	}
}

// TestSessionServerOneWritePerBatch: pipelined frames that arrive in one
// read are answered in one write. net.Pipe hands each Write to exactly one
// Read when the reader's buffer is big enough, so the first Read shows
// what the server's first write after SESSION carried.
func TestSessionServerOneWritePerBatch(t *testing.T) {
	srv, cli := net.Pipe()
	defer cli.Close()
	go new(Server).serveConn(srv)
	if _, err := cli.Write(sessionFrame); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	if n, err := cli.Read(buf); err != nil || !bytes.Equal(buf[:n], sessionOKFrame) {
		t.Fatalf("got %x (%v), want SESSION_OK", buf[:n], err)
	}
	batch := bytes.Join([][]byte{openFrame(1), release1Frame, openFrame(2), {0x02}}, nil)
	go cli.Write(batch)
	want := bytes.Join([][]byte{acquired1(1), released1Frame, {0x17, 0, 0, 0, 2, 0x12, 0, 0, 0, 0, 0, 0, 0, 2}, {0x1a}}, nil)
	if n, err := cli.Read(buf); err != nil || !bytes.Equal(buf[:n], want) {
		t.Fatalf("first write %x (%v), want every answer %x", buf[:n], err, want)
	}
}

// TestSessionServerClosesOnWhatItDoesNotServe: no reply, or none after
// SESSION_OK, to frames the session floor does not serve.
func TestSessionServerClosesOnWhatItDoesNotServe(t *testing.T) {
	addr := startServer(t)
	for name, tc := range map[string]struct {
		send, reply []byte
	}{
		"version 3 session":  {[]byte{0x05, 0x03, 0, 0, 0x27, 0x10}, nil},
		"a second SESSION":   {append(append([]byte{}, sessionFrame...), sessionFrame...), sessionOKFrame},
		"ACQUIRE in session": {append(append([]byte{}, sessionFrame...), abcFrame...), sessionOKFrame},
		"OPEN of a WATCH":    {append(append([]byte{}, sessionFrame...), 0x06, 0, 0, 0, 1, 0x0a, 0, 1, 'a'), sessionOKFrame},
		"OPEN of version 2":  {append(append([]byte{}, sessionFrame...), 0x06, 0, 0, 0, 1, 0x01, 0x02, 0, 0, 0x27, 0x10, 0, 1, 'a'), sessionOKFrame},
		"OPEN of empty name": {append(append([]byte{}, sessionFrame...), 0x06, 0, 0, 0, 1, 0x01, 0x01, 0, 0, 0x27, 0x10, 0, 0), sessionOKFrame},
	} {
		c := dial(t, addr)
		if _, err := c.Write(tc.send); err != nil {
			t.Fatal(err)
		}
		if got, eof := readAll(t, c, 5*time.Second); !bytes.Equal(got, tc.reply) || !eof {
			t.Errorf("%s: %x (eof %v), want %x and the close", name, got, eof, tc.reply)
		}
	}
}

// fakeSession accepts connections on a loopback listener and runs serve
// on each; accepted counts them.
func fakeSession(t *testing.T, serve func(c net.Conn)) (addr string, accepted *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted = new(atomic.Int32)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	return ln.Addr().String(), accepted
}

// expectBytes reads len(want) bytes from c and reports whether they are want.
func expectBytes(c net.Conn, want []byte) bool {
	got := make([]byte, len(want))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := io.ReadFull(c, got)
	return err == nil && bytes.Equal(got, want)
}

// TestSessionClientBytes: the client sends SESSION once, then OPEN and
// RELEASE with stream ids 1, 2, ... on the same connection, and takes the
// token from STREAM(ACQUIRED).
func TestSessionClientBytes(t *testing.T) {
	var wrong atomic.Value
	opened2 := make(chan struct{})
	addr, accepted := fakeSession(t, func(c net.Conn) {
		for _, s := range []struct {
			what         string
			want, answer []byte
		}{
			{"SESSION", sessionFrame, sessionOKFrame},
			{"OPEN 1", open1Frame, []byte{0x17, 0, 0, 0, 1, 0x12, 1, 2, 3, 4, 5, 6, 7, 8}},
			{"RELEASE 1", release1Frame, released1Frame},
		} {
			if !expectBytes(c, s.want) {
				wrong.Store(s.what)
				return
			}
			c.Write(s.answer)
		}
		if !expectBytes(c, openFrame(2)) {
			wrong.Store("OPEN 2")
			return
		}
		close(opened2)
		io.Copy(io.Discard, c) // no answer: the client must not be granted
	})
	cl := NewSessionClient(addr, 10*time.Second)
	defer cl.Close()
	claim, err := cl.Acquire(context.Background(), "abc")
	if err != nil {
		t.Fatal(err)
	}
	if claim.Token != 0x0102030405060708 {
		t.Errorf("token %#x", claim.Token)
	}
	if err := claim.Release(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := cl.Acquire(ctx, "abc"); err == nil {
		t.Fatal("granted without a STREAM(ACQUIRED)")
	}
	if w := wrong.Load(); w != nil {
		t.Errorf("the client sent the wrong %s", w)
	}
	select {
	case <-opened2:
	default:
		t.Error("the server never saw OPEN 2")
	}
	if n := accepted.Load(); n != 1 {
		t.Errorf("%d connections, want one session", n)
	}
}

// TestSessionClientRefuses: a WAITING, a STREAM_END, a reply of another
// stream and an ERROR are errors, and the next Acquire opens a new session.
func TestSessionClientRefuses(t *testing.T) {
	for name, reply := range map[string][]byte{
		"WAITING":      {0x17, 0, 0, 0, 1, 0x11},
		"STREAM_END":   {0x19, 0, 0, 0, 1, 0x05, 0x03, 'f', 'u', 'l'},
		"other stream": {0x17, 0, 0, 0, 7, 0x12, 0, 0, 0, 0, 0, 0, 0, 1},
		"ERROR":        {0x13, 0x1c, 0x00},
	} {
		addr, accepted := fakeSession(t, func(c net.Conn) {
			if expectBytes(c, sessionFrame) {
				c.Write(sessionOKFrame)
			}
			if expectBytes(c, open1Frame) {
				c.Write(reply)
			}
			io.Copy(io.Discard, c)
		})
		cl := NewSessionClient(addr, 10*time.Second)
		for i := range 2 {
			_, err := cl.Acquire(context.Background(), "abc")
			if err == nil {
				t.Fatalf("%s: granted", name)
			}
			if name == "STREAM_END" && !strings.Contains(err.Error(), "STREAM_END") {
				t.Errorf("%s: error %q does not say what came", name, err)
			}
			if n := accepted.Load(); n != int32(i+1) {
				t.Errorf("%s: %d sessions after %d refusals, want a new one each time", name, n, i+1)
			}
		}
		cl.Close()
	}
}

// TestSessionClientAgainstFloor runs cycles of the two ends together, and
// a second client's session beside the first.
func TestSessionClientAgainstFloor(t *testing.T) {
	addr := startServer(t)
	a, b := NewSessionClient(addr, 10*time.Second), NewSessionClient(addr, 10*time.Second)
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := uint64(1); i <= 100; i++ {
		cl := a
		if i%2 == 0 {
			cl = b
		}
		claim, err := cl.Acquire(ctx, "abc")
		if err != nil {
			t.Fatal(err)
		}
		if claim.Token != i {
			t.Fatalf("token %d, want %d", claim.Token, i)
		}
		if err := claim.Release(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSessionClientCancelled: the end of the context unblocks a claim whose
// server never answers, and the next Acquire, with a live context, opens
// a new session.
func TestSessionClientCancelled(t *testing.T) {
	addr, accepted := fakeSession(t, func(c net.Conn) {
		if expectBytes(c, sessionFrame) {
			c.Write(sessionOKFrame)
		}
		io.Copy(io.Discard, c) // never grants

	})
	cl := NewSessionClient(addr, time.Second)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := cl.Acquire(ctx, "abc")
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("granted by a silent server")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Acquire still blocked 5 s after its context ended")
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	_, _ = cl.Acquire(ctx2, "abc")
	if n := accepted.Load(); n != 2 {
		t.Errorf("%d sessions, want a new one after the cancelled one", n)
	}
}
