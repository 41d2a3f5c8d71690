package rawclient

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// serve accepts one connection and runs script on it.
func serve(t *testing.T, script func(c net.Conn)) *Conn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err == nil {
			script(c)
			c.Close()
		}
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	c := &Conn{}
	c.Reset(nc.(*net.TCPConn))
	_ = c.TCP.SetDeadline(time.Now().Add(5 * time.Second))
	return c
}

func acquireFrame(t *testing.T) []byte {
	frame, err := protocol.AppendAcquire(nil, "a", 1000)
	if err != nil {
		t.Fatal(err)
	}
	return frame
}

// A session whose replies come cut into pieces: WAITING, the ACQUIRED in
// two writes, a heartbeat's ack, then the close after the half-close.
func TestSession(t *testing.T) {
	c := serve(t, func(c net.Conn) {
		buf := make([]byte, 64)
		c.Read(buf)
		grant := protocol.AppendAcquired([]byte{protocol.MsgWaiting}, 7)
		c.Write(grant[:4])
		time.Sleep(10 * time.Millisecond)
		c.Write(grant[4:])
		c.Read(buf[:1])
		c.Write(protocol.AppendAcquired(nil, 7))
		io.Copy(io.Discard, c)
	})
	token, err := c.Acquire(acquireFrame(t), 1)
	if err != nil || token != 7 {
		t.Fatalf("Acquire = %d, %v", token, err)
	}
	if err := c.Heartbeat(); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(); err != nil {
		t.Fatal(err)
	}
}

// More WAITING replies than allowed, and an ERROR, are errors.
func TestAcquireRefuses(t *testing.T) {
	c := serve(t, func(c net.Conn) {
		c.Write([]byte{protocol.MsgWaiting, protocol.MsgWaiting})
		io.Copy(io.Discard, c)
	})
	if _, err := c.Acquire(acquireFrame(t), 1); err == nil {
		t.Fatal("a second WAITING accepted")
	}
	c = serve(t, func(c net.Conn) {
		c.Write(protocol.AppendError(nil, 0x18, "not authorized"))
		io.Copy(io.Discard, c)
	})
	_, err := c.Acquire(acquireFrame(t), AnyWaiting)
	var se *ServerError
	if !errors.As(err, &se) || se.Frame.Code != 0x18 {
		t.Fatalf("Acquire = %v, want the ERROR 0x18", err)
	}
}
