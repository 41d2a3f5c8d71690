package session

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// The same frames come out however the stream is cut: whole, one byte per
// read, or all in one read.
func TestDecoderReassembles(t *testing.T) {
	var stream []byte
	stream = append(stream, protocol.MsgWaiting)
	stream = protocol.AppendAcquired(stream, 1<<53+1)
	stream = protocol.AppendError(stream, 0x02, "")
	stream = protocol.AppendError(stream, 0x7e, strings.Repeat("é", 127))
	want := []frame{
		{typ: protocol.MsgWaiting},
		{typ: protocol.MsgAcquired, token: 1<<53 + 1},
		{typ: protocol.MsgError, code: 0x02},
		{typ: protocol.MsgError, code: 0x7e, reason: strings.Repeat("é", 127)},
	}
	for _, size := range []int{1, 2, 3, 5, 9, len(stream)} {
		var d decoder
		var got []frame
		for i := 0; i < len(stream); i += size {
			chunk := stream[i:min(i+size, len(stream))]
			for {
				f, rest, ok, bad := d.next(chunk)
				require.Nil(t, bad)
				if !ok {
					break
				}
				got = append(got, f)
				chunk = rest
			}
		}
		require.Equal(t, want, got, "reads of %d bytes", size)
	}
}

func TestDecoderRefusesUnknownType(t *testing.T) {
	var d decoder
	_, _, ok, bad := d.next([]byte("HTTP/1.1 400"))
	require.False(t, ok)
	require.NotNil(t, bad)
	require.Equal(t, CauseProtocol, bad.Kind)
	require.Contains(t, bad.Reason, "0x48")
}
