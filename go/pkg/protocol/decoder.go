package protocol

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// Frame is one server message, as a Decoder returns it.
type Frame struct {
	Type   uint8  // MsgWaiting, MsgAcquired or MsgError
	Token  uint64 // ACQUIRED: the fencing token
	Code   uint8  // ERROR: the error code, when Coded
	Coded  bool   // ERROR: the code byte had arrived
	Reason string // ERROR: the reason bytes that had arrived, a cut or invalid UTF-8 sequence as U+FFFD
}

// maxServerFrame is the longest server message: an ERROR (type, code,
// length) with a reason of 255 bytes, the most its length byte can say.
const maxServerFrame = 3 + maxReasonLen

// Decoder reassembles server messages (WAITING, ACQUIRED, ERROR) from a
// byte stream, for a client that reads without blocking: a frame may come
// split over many reads, several may come in one. It keeps at most one
// partial frame, in a fixed buffer, so decoding never allocates (except the
// reason of an ERROR). The zero Decoder is ready to use; use one per
// connection.
type Decoder struct {
	buf [maxServerFrame]byte
	n   int
}

// Next takes bytes from data until one frame is complete. It returns that
// frame and the unread rest of data; ok is false when data ran out first
// (the partial frame is kept for the next call). A byte that starts no
// server message is an error: the stream cannot be resynchronised, so the
// caller ends the session.
//
// An ERROR is the exception: it ends the session at its type byte, so it is
// returned as soon as data runs out, whole or not, with what had arrived
// (Coded and Code if the code byte came, the reason bytes that came). A
// client that waited for the rest would hold a lock the server has already
// ended for as long as the server takes to send it, which may be forever.
func (d *Decoder) Next(data []byte) (f Frame, rest []byte, ok bool, err error) {
	for len(data) > 0 {
		if d.n == 0 {
			switch data[0] {
			case MsgWaiting, MsgAcquired, MsgError:
			default:
				return Frame{}, nil, false, fmt.Errorf("unknown message type 0x%02x", data[0])
			}
		}
		k := copy(d.buf[d.n:d.want(data[0])], data)
		d.n += k
		data = data[k:]
		if d.n == d.want(0) || (d.buf[0] == MsgError && len(data) == 0) {
			f = d.frame()
			d.n = 0
			return f, data, true, nil
		}
	}
	return Frame{}, nil, false, nil
}

// want is the length of the frame being read, as far as it is known: an
// ERROR's once its reason-length byte has arrived. first is the type byte
// when no byte of the frame has been kept yet.
func (d *Decoder) want(first byte) int {
	typ := first
	if d.n > 0 {
		typ = d.buf[0]
	}
	switch typ {
	case MsgWaiting:
		return 1
	case MsgAcquired:
		return 9
	}
	if d.n < 3 {
		return 3
	}
	return 3 + int(d.buf[2])
}

func (d *Decoder) frame() Frame {
	f := Frame{Type: d.buf[0]}
	switch f.Type {
	case MsgAcquired:
		f.Token = binary.BigEndian.Uint64(d.buf[1:9])
	case MsgError:
		if d.n >= 2 {
			f.Code, f.Coded = d.buf[1], true
		}
		if d.n > 3 {
			f.Reason = strings.ToValidUTF8(string(d.buf[3:d.n]), "\uFFFD")
		}
	}
	return f
}
