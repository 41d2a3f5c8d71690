package server

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/testspec"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// outcome is what a fresh server must answer to a byte stream from a single
// client: some ACQUIREDs (the grant, then one per heartbeat), then either an
// ERROR and a close, or nothing more with the connection left open.
type outcome struct {
	acquired int
	final    *protocol.Error // nil: the connection stays open
	reason   string          // exact reason, when the server adds detail
	leaseMS  uint32          // the granted lease, 0 before a grant
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
	if data[1] != protocol.Version {
		return outcome{final: protocol.ErrUnsupportedVersion}
	}
	if len(data) < 8 {
		return outcome{}
	}
	lease := binary.BigEndian.Uint32(data[2:6])
	nameLen := int(binary.BigEndian.Uint16(data[6:8]))
	switch {
	case lease == 0:
		return outcome{final: protocol.ErrInvalidLease}
	case nameLen == 0:
		return outcome{final: protocol.ErrEmptyName}
	case nameLen > protocol.MaxNameLen:
		return outcome{final: protocol.ErrNameTooLong}
	case len(data) < 8+nameLen:
		return outcome{}
	case !utf8.Valid(data[8 : 8+nameLen]):
		return outcome{final: protocol.ErrNameNotUTF8}
	}
	out := outcome{acquired: 1, leaseMS: lease}
	for _, b := range data[8+nameLen:] {
		switch b {
		case protocol.MsgHeartbeat:
			out.acquired++
		case protocol.MsgAcquire:
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

// FuzzSessionByteStream sends arbitrary bytes, in arbitrary chunks, to a
// fresh server and checks every frame that comes back against model. Without
// -fuzz it runs the seed corpus: every byte vector of the spec.
func FuzzSessionByteStream(f *testing.F) {
	for _, tc := range loadServerInvalidFrom(f, testspec.Read(f, "vectors/frames.json")).Cases {
		b, err := hex.DecodeString(tc.SendHex)
		require.NoError(f, err)
		f.Add(b, uint8(0))
		f.Add(b, uint8(1))
	}
	valid, _ := protocol.AppendAcquire(nil, "fuzz", 60000)
	f.Add(append(valid, 2, 2, 2, 1, 2), uint8(3))
	f.Add(append(valid, 2, 0x13), uint8(2))
	f.Add(valid[:5], uint8(0))

	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		if len(data) > 1024 {
			return // longer streams add nothing but time
		}
		want := model(data)
		srv := startServer(t, Config{})
		c := dial(t, srv.addr)
		step := 1 + int(chunk%16)
		for i := 0; i < len(data); i += step {
			// The server may close early on purpose; it still answers.
			_, _ = c.conn.Write(data[i:min(i+step, len(data))])
		}
		var token uint64
		for i := 0; i < want.acquired; i++ {
			got, err := c.read(replyTimeout)
			if isClosed(err) && want.leaseMS < 2000 {
				return // a short lease may expire between chunks
			}
			require.NoError(t, err, "reply %d of %d", i, want.acquired)
			require.Equal(t, protocol.MsgAcquired, got.Type, "reply %d: %v", i, got)
			if token == 0 {
				token = got.Token
			}
			require.Equal(t, token, got.Token)
		}
		if want.final == nil {
			got, err := c.read(20 * time.Millisecond)
			if isClosed(err) && want.leaseMS != 0 && want.leaseMS < 2000 {
				return
			}
			require.Truef(t, errors.Is(err, os.ErrDeadlineExceeded), "want an open, quiet connection, got %v, %v", got, err)
			return
		}
		got, err := c.read(replyTimeout)
		if isClosed(err) && want.leaseMS != 0 && want.leaseMS < 2000 {
			return
		}
		require.NoError(t, err)
		require.Equal(t, protocol.MsgError, got.Type, "got %v", got)
		require.Equal(t, want.final.Code, got.Code, "got %v", got)
		if want.reason != "" {
			require.Equal(t, want.reason, got.Reason)
		}
		c.expectClosed()
	})
}
