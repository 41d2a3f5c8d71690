package floor

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// The ACQUIRE frame of docs/protocol.md for name "abc" and a 10 s lease,
// written out byte by byte rather than built with pkg/protocol.
var abcFrame = []byte{0x01, 0x01, 0x00, 0x00, 0x27, 0x10, 0x00, 0x03, 'a', 'b', 'c'}

func TestMain(m *testing.M) {
	// TestProcess runs this test binary as `bench floor`.
	if os.Getenv("FLOOR_TEST_CHILD") == "1" && len(os.Args) > 1 && os.Args[1] == "floor" {
		os.Exit(Main(os.Args[2:]))
	}
	os.Exit(m.Run())
}

func startServer(t *testing.T) string {
	t.Helper()
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- new(Server).Serve(ln) }()
	t.Cleanup(func() {
		ln.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

func dial(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// readAll reads until EOF or the deadline, and reports whether it was EOF.
func readAll(t *testing.T, c net.Conn, wait time.Duration) ([]byte, bool) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(wait))
	var got []byte
	buf := make([]byte, 64)
	for {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			return got, true
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return got, false
			}
			t.Fatalf("read: %v", err)
		}
	}
}

// TestServerExchangeBytes: the server answers an ACQUIRE that arrives in
// pieces with exactly one 9-byte ACQUIRED (tokens 1, 2, ...), keeps the
// connection open until the client's half-close, then closes without
// sending anything more.
func TestServerExchangeBytes(t *testing.T) {
	addr := startServer(t)
	for tok := byte(1); tok <= 3; tok++ {
		c := dial(t, addr)
		for _, part := range [][]byte{abcFrame[:1], abcFrame[1:7], abcFrame[7:9], abcFrame[9:]} {
			if _, err := c.Write(part); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Millisecond)
		}
		got, eof := readAll(t, c, 100*time.Millisecond)
		if want := []byte{0x12, 0, 0, 0, 0, 0, 0, 0, tok}; !bytes.Equal(got, want) || eof {
			t.Fatalf("reply %x (eof %v), want %x and the connection still open", got, eof, want)
		}
		if err := c.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		if got, eof := readAll(t, c, 5*time.Second); len(got) != 0 || !eof {
			t.Fatalf("after the half-close: %x (eof %v), want the server's close and nothing else", got, eof)
		}
	}
}

// TestServerClosesOnAnythingButAnAcquire: no reply to a frame that is not
// a version-1 ACQUIRE with a name of 1 to 255 bytes.
func TestServerClosesOnAnythingButAnAcquire(t *testing.T) {
	addr := startServer(t)
	for name, frame := range map[string][]byte{
		"heartbeat":  {0x02},
		"version 2":  {0x01, 0x02, 0, 0, 0x27, 0x10, 0, 1, 'a'},
		"empty name": {0x01, 0x01, 0, 0, 0x27, 0x10, 0, 0},
		"long name":  {0x01, 0x01, 0, 0, 0x27, 0x10, 0x01, 0x00},
	} {
		c := dial(t, addr)
		if _, err := c.Write(frame); err != nil {
			t.Fatal(err)
		}
		if name == "heartbeat" {
			_ = c.CloseWrite() // a short frame: the server needs the EOF to give up
		}
		if got, eof := readAll(t, c, 5*time.Second); len(got) != 0 || !eof {
			t.Errorf("%s: %x (eof %v), want a close without reply", name, got, eof)
		}
	}
}

// TestBareClientBytes: the bare client sends exactly the ACQUIRE frame,
// half-closes after reading ACQUIRED, and Release returns only after the
// server's close.
func TestBareClientBytes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var closed atomic.Bool
	received := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, len(abcFrame))
		if _, err := io.ReadFull(c, buf); err != nil {
			received <- nil
			return
		}
		c.Write([]byte{0x12, 1, 2, 3, 4, 5, 6, 7, 8})
		rest, _ := io.ReadAll(c) // until the client's half-close
		received <- append(buf, rest...)
		time.Sleep(50 * time.Millisecond)
		closed.Store(true)
	}()
	cl := NewClient(ln.Addr().String(), 10*time.Second)
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
	if !closed.Load() {
		t.Error("Release returned before the server closed")
	}
	if got := <-received; !bytes.Equal(got, abcFrame) {
		t.Errorf("client sent %x, want %x then its half-close", got, abcFrame)
	}
}

// TestBareClientAgainstFloor runs cycles of the two ends together.
func TestBareClientAgainstFloor(t *testing.T) {
	cl := NewClient(startServer(t), 10*time.Second)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := uint64(1); i <= 100; i++ {
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

// TestBareClientRefusesWaiting: the bare client does not queue.
func TestBareClientRefusesWaiting(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Write([]byte{0x11, 0, 0, 0, 0, 0, 0, 0, 0})
			io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	cl := NewClient(ln.Addr().String(), time.Second)
	defer cl.Close()
	if _, err := cl.Acquire(context.Background(), "abc"); err == nil {
		t.Fatal("WAITING accepted as a grant")
	}
}

// TestBareClientCancelled: the end of the context unblocks a claim whose
// server never answers.
func TestBareClientCancelled(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	cl := NewClient(ln.Addr().String(), time.Second)
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
}

// TestProcess runs the floor as a child process, as the benchmark does.
func TestProcess(t *testing.T) {
	t.Setenv("FLOOR_TEST_CHILD", "1")
	p, err := Start(context.Background(), os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	if p.PID() == os.Getpid() {
		t.Fatal("the floor runs in the test process")
	}
	cl := NewClient(p.Addr, time.Second)
	defer cl.Close()
	claim, err := cl.Acquire(context.Background(), "abc")
	if err != nil {
		t.Fatal(err)
	}
	if claim.Token != 1 {
		t.Errorf("token %d, want 1", claim.Token)
	}
	if err := claim.Release(); err != nil {
		t.Fatal(err)
	}
	p.Stop()
	select {
	case <-p.done:
	default:
		t.Error("Stop returned before the process ended")
	}
}
