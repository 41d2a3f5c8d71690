//go:build unix

package client

import (
	"net"
	"syscall"
)

// socketWriter writes to a plain socket without waiting: what the kernel
// takes at once is sent, the rest is left to the session's writer. It
// spares a session's writer goroutine a wake-up per frame when the socket
// has room, which is nearly always.
type socketWriter struct {
	rc    syscall.RawConn
	write func(fd uintptr) bool // w.writeFD, bound once: no allocation per write
	b     []byte                // what write sends; the session's mu guards both
	n     int
}

// newSocketWriter returns nil where conn is no plain socket (TLS, a pipe).
func newSocketWriter(conn net.Conn) *socketWriter {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	w := &socketWriter{rc: rc}
	w.write = w.writeFD
	return w
}

// writeNow writes what the socket takes of b without waiting and returns
// how much that was: 0 when it is full or failed (the writer then meets
// the failure, and ends the session by the usual path).
func (w *socketWriter) writeNow(b []byte) int {
	w.b, w.n = b, 0
	_ = w.rc.Write(w.write)
	w.b = nil
	return max(w.n, 0)
}

func (w *socketWriter) writeFD(fd uintptr) bool {
	w.n, _ = syscall.Write(int(fd), w.b)
	return true // never wait for room
}
