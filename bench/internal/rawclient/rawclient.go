// Package rawclient speaks the monolock protocol by hand over one TCP
// connection, for the bench's clients that must cost no more than the wire
// itself: the floor's bare client, the handoff profile's raw waiter and the
// idle-session holders. Frames are built and decoded with pkg/protocol;
// there is no heartbeat schedule, retry or goroutine here: the caller
// decides what to send and when, and one Conn is one session.
package rawclient

import (
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// AnyWaiting lets Acquire wait through any number of WAITING replies.
const AnyWaiting = -1

// Conn is one raw session. The zero Conn is unusable: Reset it onto a
// connection first. A Conn may be reused (Reset) for the next connection,
// so that a worker's claims allocate nothing of their own.
type Conn struct {
	TCP  *net.TCPConn
	dec  protocol.Decoder
	buf  [16]byte // server frames are small; the decoder keeps a partial one
	rest []byte   // read but not decoded yet: a slice of buf
}

// Reset points c at a new connection, dropping what was left of the last.
func (c *Conn) Reset(tcp *net.TCPConn) {
	c.TCP, c.dec, c.rest = tcp, protocol.Decoder{}, nil
}

// ReadFrame returns the next server frame, reading as needed. An ERROR
// comes back as an error (a *ServerError): it ends the session.
func (c *Conn) ReadFrame() (protocol.Frame, error) {
	for {
		if len(c.rest) > 0 {
			f, rest, ok, err := c.dec.Next(c.rest)
			c.rest = rest
			if err != nil {
				return protocol.Frame{}, err
			}
			if ok {
				if f.Type == protocol.MsgError {
					return f, &ServerError{f}
				}
				return f, nil
			}
		}
		n, err := c.TCP.Read(c.buf[:])
		c.rest = c.buf[:n]
		if n == 0 && err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return protocol.Frame{}, err
		}
	}
}

// Acquire sends acquire, an ACQUIRE frame from protocol.AppendAcquire
// (built by the caller, who may reuse it and who checks the name before
// dialing), and reads replies up to the ACQUIRED, whose token it returns.
// Up to waits WAITING replies may come first (AnyWaiting: any number); one
// more is an error.
func (c *Conn) Acquire(acquire []byte, waits int) (uint64, error) {
	if _, err := c.TCP.Write(acquire); err != nil {
		return 0, err
	}
	for {
		f, err := c.ReadFrame()
		if err != nil {
			return 0, fmt.Errorf("reading the reply to ACQUIRE: %w", err)
		}
		if f.Type == protocol.MsgAcquired {
			return f.Token, nil
		}
		if waits == 0 {
			return 0, fmt.Errorf("got %s, want ACQUIRED", protocol.MsgName(f.Type))
		}
		if waits > 0 {
			waits--
		}
	}
}

var heartbeat = []byte{protocol.MsgHeartbeat}

// Heartbeat sends one HEARTBEAT and reads its ack, which for a held lock
// is an ACQUIRED.
func (c *Conn) Heartbeat() error {
	if _, err := c.TCP.Write(heartbeat); err != nil {
		return err
	}
	f, err := c.ReadFrame()
	if err == nil && f.Type != protocol.MsgAcquired {
		err = fmt.Errorf("got %s, want ACQUIRED", protocol.MsgName(f.Type))
	}
	return err
}

// Release half-closes and reads until the server's close: when it returns
// nil, the server has let the lock go. It does not close the connection.
// A held lock that sends nothing gets nothing, so any byte is an error.
func (c *Conn) Release() error {
	if err := c.TCP.CloseWrite(); err != nil {
		return err
	}
	if len(c.rest) > 0 {
		return fmt.Errorf("%d unexpected bytes after ACQUIRED", len(c.rest))
	}
	for {
		n, err := c.TCP.Read(c.buf[:])
		if n > 0 {
			return fmt.Errorf("%d unexpected bytes after ACQUIRED", n)
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// ServerError is an ERROR frame from the server.
type ServerError struct{ Frame protocol.Frame }

func (e *ServerError) Error() string {
	if !e.Frame.Coded {
		return "got ERROR (cut before its code)"
	}
	return fmt.Sprintf("got ERROR 0x%02x (%s) %q", e.Frame.Code, protocol.ErrCodeName(e.Frame.Code), e.Frame.Reason)
}
