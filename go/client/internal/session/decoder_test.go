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
	stream = append(stream, protocol.MsgWaiting)
	want := []frame{
		{typ: protocol.MsgWaiting},
		{typ: protocol.MsgAcquired, token: 1<<53 + 1},
		{typ: protocol.MsgWaiting},
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

// An ERROR ends the session at its type byte: it comes out when the read
// ends, whole or not, with the code if its byte came and the reason bytes
// that came (a cut UTF-8 sequence becomes U+FFFD).
func TestDecoderErrorAtFirstByte(t *testing.T) {
	whole := protocol.AppendError(nil, 0x7e, strings.Repeat("é", 127))
	for _, tc := range []struct {
		read []byte
		want frame
	}{
		{[]byte{0x13}, frame{typ: protocol.MsgError}},
		{[]byte{0x13, 0x02}, frame{typ: protocol.MsgError, code: 0x02, coded: true}},
		{[]byte{0x13, 0x02, 0xc8}, frame{typ: protocol.MsgError, code: 0x02, coded: true}},
		{[]byte{0x13, 0x02, 0xc8, 'h', 'e', 'l', 'l', 'o'}, frame{typ: protocol.MsgError, code: 0x02, coded: true, reason: "hello"}},
		{[]byte{0x13, 0x02, 0x03, 'a', 0xc3}, frame{typ: protocol.MsgError, code: 0x02, coded: true, reason: "a\uFFFD"}},
		{whole, frame{typ: protocol.MsgError, code: 0x7e, coded: true, reason: strings.Repeat("é", 127)}},
		{append([]byte{0x11}, 0x13, 0x01), frame{typ: protocol.MsgWaiting}},
	} {
		var d decoder
		f, _, ok, bad := d.next(tc.read)
		require.Nil(t, bad)
		require.True(t, ok, "% x", tc.read)
		require.Equal(t, tc.want, f, "% x", tc.read)
	}
	// Split after the type byte: the first read already ends the session.
	var d decoder
	f, _, ok, _ := d.next(whole[:1])
	require.True(t, ok)
	require.Equal(t, frame{typ: protocol.MsgError}, f)
}
