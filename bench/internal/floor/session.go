package floor

import (
	"encoding/binary"
	"net"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// The floor of a session (protocol version 4): the same server, when a
// connection starts with SESSION, answers SESSION_OK and then every OPEN of
// a version-1 ACQUIRE with STREAM(ACQUIRED) and an increasing token, every
// RELEASE with RELEASED and every HEARTBEAT with ALIVE. It keeps no lock
// table, no lease and no stream ids: the floor of a session cycle is the
// two exchanges on an open connection and nothing else. It reads whatever
// has arrived, answers every whole frame in it, and writes the answers in
// one write, as the real server does per turn.

// Frame sizes of a session, type byte included.
const (
	sessionLen  = 1 + 1 + 4 // SESSION: type, version, lease_ms
	streamHead  = 1 + 4     // OPEN, RELEASE, STREAM, RELEASED: type, stream id
	openHeadLen = streamHead + acquireHeaderLen
)

// sessionReadBuf is how many bytes one read may bring: many pipelined
// frames, and always room for one whole OPEN.
const sessionReadBuf = 64 << 10

// serveSession serves one session whose first bytes, already read, are
// first. Anything but a version-4 SESSION first, then OPEN(version-1
// ACQUIRE), RELEASE and HEARTBEAT, closes the connection once the frames
// before it are answered.
func (s *Server) serveSession(c net.Conn, first []byte) {
	in := make([]byte, 0, sessionReadBuf)
	in = append(in, first...)
	var out []byte
	opened := false
	for {
		off := 0
		for {
			n, reply, ok := s.sessionFrame(in[off:], out, opened)
			if !ok {
				_, _ = c.Write(out) // what came before the bad frame is answered
				return
			}
			if n == 0 {
				break // the rest is a frame still in flight
			}
			off, out, opened = off+n, reply, true
		}
		if len(out) > 0 {
			if _, err := c.Write(out); err != nil {
				return
			}
			out = out[:0]
		}
		in = in[:copy(in, in[off:])]
		m, err := c.Read(in[len(in):cap(in)])
		in = in[:len(in)+m]
		if m == 0 && err != nil {
			return
		}
	}
}

// sessionFrame answers the frame at the start of b, appending the answer
// to out. n is the frame's length, 0 when b holds only part of it; ok is
// false for bytes the floor does not serve. Before the session is opened
// only SESSION is served, after it everything but SESSION.
func (s *Server) sessionFrame(b, out []byte, opened bool) (n int, reply []byte, ok bool) {
	if len(b) == 0 {
		return 0, out, true
	}
	if !opened {
		if b[0] != protocol.MsgSession {
			return 0, out, false
		}
		if len(b) < sessionLen {
			return 0, out, len(b) < 2 || b[1] == protocol.VersionSession
		}
		if b[1] != protocol.VersionSession {
			return 0, out, false
		}
		return sessionLen, protocol.AppendSessionOK(out, protocol.DefaultMaxStreams), true
	}
	switch b[0] {
	case protocol.MsgHeartbeat:
		return 1, append(out, protocol.MsgAlive), true
	case protocol.MsgRelease:
		if len(b) < streamHead {
			return 0, out, true
		}
		return streamHead, protocol.AppendStreamHeader(out, protocol.MsgReleased, streamID(b)), true
	case protocol.MsgOpen:
		if len(b) <= streamHead {
			return 0, out, true
		}
		// Judge the inner frame's type and version as soon as they are in.
		acq := b[streamHead:]
		if len(acq) > 0 && acq[0] != protocol.MsgAcquire || len(acq) > 1 && acq[1] != protocol.Version {
			return 0, out, false
		}
		if len(b) < openHeadLen {
			return 0, out, true
		}
		nameLen := int(binary.BigEndian.Uint16(acq[6:8]))
		if nameLen == 0 || nameLen > protocol.MaxNameLen {
			return 0, out, false
		}
		if len(b) < openHeadLen+nameLen {
			return 0, out, true
		}
		out = protocol.AppendStreamHeader(out, protocol.MsgStream, streamID(b))
		return openHeadLen + nameLen, protocol.AppendAcquired(out, s.token.Add(1)), true
	}
	return 0, out, false
}

// streamID is the id of the stream frame at the start of b.
func streamID(b []byte) uint32 { return binary.BigEndian.Uint32(b[1:streamHead]) }
