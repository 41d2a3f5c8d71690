package protocol

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The same frames come out however the stream is cut: whole, one byte per
// read, or all in one read.
func TestDecoderReassembles(t *testing.T) {
	var stream []byte
	stream = append(stream, MsgWaiting)
	stream = AppendAcquired(stream, 1<<53+1)
	stream = append(stream, MsgWaiting)
	want := []Frame{
		{Type: MsgWaiting},
		{Type: MsgAcquired, Token: 1<<53 + 1},
		{Type: MsgWaiting},
	}
	for _, size := range []int{1, 2, 3, 5, 9, len(stream)} {
		require.Equal(t, want, decodeChunks(t, stream, size), "reads of %d bytes", size)
	}
}

// decodeChunks feeds stream to a Decoder in reads of size bytes and
// returns the frames, failing on a decode error.
func decodeChunks(t testing.TB, stream []byte, size int) []Frame {
	var d Decoder
	var got []Frame
	for i := 0; i < len(stream); i += size {
		chunk := stream[i:min(i+size, len(stream))]
		for {
			f, rest, ok, err := d.Next(chunk)
			require.NoError(t, err)
			if !ok {
				break
			}
			got = append(got, f)
			chunk = rest
		}
	}
	return got
}

func TestDecoderRefusesUnknownType(t *testing.T) {
	var d Decoder
	_, _, ok, err := d.Next([]byte("HTTP/1.1 400"))
	require.False(t, ok)
	require.Error(t, err)
	require.Contains(t, err.Error(), "0x48")
}

// An ERROR ends the session at its type byte: it comes out when the read
// ends, whole or not, with the code if its byte came and the reason bytes
// that came (a cut UTF-8 sequence becomes U+FFFD).
func TestDecoderErrorAtFirstByte(t *testing.T) {
	whole := AppendError(nil, 0x7e, strings.Repeat("é", 127))
	for _, tc := range []struct {
		read []byte
		want Frame
	}{
		{[]byte{0x13}, Frame{Type: MsgError}},
		{[]byte{0x13, 0x02}, Frame{Type: MsgError, Code: 0x02, Coded: true}},
		{[]byte{0x13, 0x02, 0xc8}, Frame{Type: MsgError, Code: 0x02, Coded: true}},
		{[]byte{0x13, 0x02, 0xc8, 'h', 'e', 'l', 'l', 'o'}, Frame{Type: MsgError, Code: 0x02, Coded: true, Reason: "hello"}},
		{[]byte{0x13, 0x02, 0x03, 'a', 0xc3}, Frame{Type: MsgError, Code: 0x02, Coded: true, Reason: "a\uFFFD"}},
		{whole, Frame{Type: MsgError, Code: 0x7e, Coded: true, Reason: strings.Repeat("é", 127)}},
		{append([]byte{0x11}, 0x13, 0x01), Frame{Type: MsgWaiting}},
	} {
		var d Decoder
		f, _, ok, err := d.Next(tc.read)
		require.NoError(t, err)
		require.True(t, ok, "% x", tc.read)
		require.Equal(t, tc.want, f, "% x", tc.read)
	}
	// Split after the type byte: the first read already ends the session.
	var d Decoder
	f, _, ok, _ := d.Next(whole[:1])
	require.True(t, ok)
	require.Equal(t, Frame{Type: MsgError}, f)
}

// Decoding a WAITING or an ACQUIRED allocates nothing, split or not: the
// client decodes every reply to every heartbeat.
func TestDecoderDoesNotAllocate(t *testing.T) {
	stream := AppendAcquired([]byte{MsgWaiting}, 7)
	var d Decoder
	n := testing.AllocsPerRun(100, func() {
		for _, chunk := range [][]byte{stream[:3], stream[3:]} {
			for {
				_, rest, ok, _ := d.Next(chunk)
				if !ok {
					break
				}
				chunk = rest
			}
		}
	})
	require.Zero(t, n)
}

// FuzzDecoder cuts a stream at two fuzzed points: the decoder never
// panics, and up to the first ERROR or decode error it returns the same
// frames as when the stream comes whole, each re-encoding to its bytes.
func FuzzDecoder(f *testing.F) {
	f.Add(AppendAcquired([]byte{MsgWaiting}, 42), uint8(1), uint8(5))
	f.Add(AppendError([]byte{MsgWaiting}, 0x02, "kicked"), uint8(2), uint8(4))
	f.Add([]byte{MsgWaiting, 0x7f}, uint8(0), uint8(1))
	f.Fuzz(func(t *testing.T, stream []byte, cut1, cut2 uint8) {
		a, b := int(cut1)%(len(stream)+1), int(cut2)%(len(stream)+1)
		a, b = min(a, b), max(a, b)
		whole, wholeErr := decodeAll([][]byte{stream})
		split, splitErr := decodeAll([][]byte{stream[:a], stream[a:b], stream[b:]})
		prefix := func(fs []Frame) []Frame { // the frames before the first ERROR
			for i, f := range fs {
				if f.Type == MsgError {
					return fs[:i]
				}
			}
			return fs
		}
		if (wholeErr == nil) != (splitErr == nil) && len(prefix(whole)) == len(whole) && len(prefix(split)) == len(split) {
			t.Fatalf("chunking changed the error: %v / %v", wholeErr, splitErr)
		}
		if !framesEqual(prefix(whole), prefix(split)) {
			t.Fatalf("chunking changed the frames: %v / %v", whole, split)
		}
		var re []byte
		for _, f := range prefix(whole) {
			if f.Type == MsgWaiting {
				re = append(re, MsgWaiting)
			} else {
				re = AppendAcquired(re, f.Token)
			}
		}
		if !bytes.HasPrefix(stream, re) {
			t.Fatalf("re-encoded %x is not a prefix of %x", re, stream)
		}
	})
}

// decodeAll decodes the reads in turn until the first ERROR (the end of a
// session) or decode error.
func decodeAll(reads [][]byte) ([]Frame, error) {
	var d Decoder
	var got []Frame
	for _, chunk := range reads {
		for len(chunk) > 0 {
			f, rest, ok, err := d.Next(chunk)
			if err != nil {
				return got, err
			}
			if !ok {
				break
			}
			got = append(got, f)
			if f.Type == MsgError {
				return got, nil
			}
			chunk = rest
		}
	}
	return got, nil
}

func framesEqual(a, b []Frame) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
