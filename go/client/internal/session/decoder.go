package session

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/monolock/monolock/go/internal/spec"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// frame is one message from the server.
type frame struct {
	typ    uint8
	token  uint64 // ACQUIRED
	code   uint8  // ERROR
	coded  bool   // ERROR: the code byte had arrived
	reason string // ERROR: the reason bytes that had arrived
}

// maxFrame is the longest server message: an ERROR (type, code, length)
// with a reason of 255 bytes, the most its length byte can say.
const maxFrame = 3 + spec.MaxReasonLen

// decoder reassembles server frames from a byte stream: a frame may come
// split over many reads, several may come in one. It keeps at most one
// partial frame, in a fixed buffer, so decoding never allocates (except the
// reason of an ERROR).
type decoder struct {
	buf [maxFrame]byte
	n   int
}

// next takes bytes from data until one frame is complete. It returns that
// frame and the unread rest of data; ok is false when data ran out first
// (the partial frame is kept). A byte that starts no server message is a
// protocol violation.
//
// An ERROR is the exception: it ends the session at its type byte, so it is
// returned as soon as data runs out, whole or not, with what had arrived
// (the code if its byte came, the reason bytes that came). Waiting for the
// rest would hold a lock the server has already ended for as long as the
// server takes to send it, which may be forever.
func (d *decoder) next(data []byte) (f frame, rest []byte, ok bool, bad *Cause) {
	for len(data) > 0 {
		if d.n == 0 {
			switch data[0] {
			case protocol.MsgWaiting, protocol.MsgAcquired, protocol.MsgError:
			default:
				return frame{}, nil, false, &Cause{Kind: CauseProtocol,
					Reason: fmt.Sprintf("unknown message type 0x%02x", data[0])}
			}
		}
		k := copy(d.buf[d.n:d.want(data[0])], data)
		d.n += k
		data = data[k:]
		if d.n == d.want(0) || (d.buf[0] == protocol.MsgError && len(data) == 0) {
			f = d.frame()
			d.n = 0
			return f, data, true, nil
		}
	}
	return frame{}, nil, false, nil
}

// want is the length of the frame being read, as far as it is known: an
// ERROR's once its reason-length byte has arrived. first is the type byte
// when no byte of the frame has been kept yet.
func (d *decoder) want(first byte) int {
	typ := first
	if d.n > 0 {
		typ = d.buf[0]
	}
	switch typ {
	case protocol.MsgWaiting:
		return 1
	case protocol.MsgAcquired:
		return 9
	}
	if d.n < 3 {
		return 3
	}
	return 3 + int(d.buf[2])
}

func (d *decoder) frame() frame {
	f := frame{typ: d.buf[0]}
	switch f.typ {
	case protocol.MsgAcquired:
		f.token = binary.BigEndian.Uint64(d.buf[1:9])
	case protocol.MsgError:
		if d.n >= 2 {
			f.code, f.coded = d.buf[1], true
		}
		if d.n > 3 {
			f.reason = strings.ToValidUTF8(string(d.buf[3:d.n]), "\uFFFD")
		}
	}
	return f
}
