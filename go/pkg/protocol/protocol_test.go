package protocol

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAppendAcquireLayout(t *testing.T) {
	got, err := AppendAcquire([]byte{0xaa}, "ab", 0x01020304)
	require.NoError(t, err)
	assert.Equal(t, []byte{0xaa, MsgAcquire, Version, 1, 2, 3, 4, 0, 2, 'a', 'b'}, got, "appends after dst")
}

func TestAppendAcquireValidation(t *testing.T) {
	cases := []struct {
		desc  string
		name  string
		lease uint32
		want  *Error
	}{
		{"lease zero", "a", 0, ErrInvalidLease},
		{"lease checked before name", "", 0, ErrInvalidLease},
		{"empty name", "", 1, ErrEmptyName},
		{"256 bytes", strings.Repeat("a", 256), 1, ErrNameTooLong},
		{"too long beats invalid UTF-8", strings.Repeat("\xff", 256), 1, ErrNameTooLong},
		{"invalid UTF-8", "a\xc3", 1, ErrNameNotUTF8},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			dst := []byte{7}
			got, err := AppendAcquire(dst, tc.name, tc.lease)
			assert.Same(t, tc.want, err)
			assert.Equal(t, []byte{7}, got, "dst unchanged on error")
		})
	}
	_, err := AppendAcquire(nil, strings.Repeat("é", 127)+"a", 1)
	assert.NoError(t, err, "255 bytes is the limit, inclusive")
}

func TestAppendAcquired(t *testing.T) {
	assert.Equal(t, []byte{0x12, 0, 0, 0, 0, 0, 0, 1, 2}, AppendAcquired(nil, 258))
	tok, err := ReadAcquiredBody(bytes.NewReader(AppendAcquired(nil, ^uint64(0))[1:]))
	require.NoError(t, err)
	assert.Equal(t, ^uint64(0), tok)
}

func TestAppendErrorTruncatesOnRuneBoundary(t *testing.T) {
	cases := []struct {
		desc    string
		reason  string
		wantLen int
	}{
		{"short", "x", 1},
		{"exactly 255", strings.Repeat("a", 255), 255},
		{"ascii over", strings.Repeat("a", 300), 255},
		{"2-byte rune straddles the limit", "a" + strings.Repeat("é", 200), 255},
		{"2-byte rune ends past the limit", strings.Repeat("é", 200), 254},
		{"4-byte rune straddles the limit", strings.Repeat("a", 253) + "🔒", 253},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			frame := AppendError(nil, 0x13, tc.reason)
			require.Equal(t, MsgError, frame[0])
			code, reason, err := ReadErrorBody(bytes.NewReader(frame[1:]))
			require.NoError(t, err)
			assert.Equal(t, uint8(0x13), code)
			assert.Len(t, reason, tc.wantLen)
			assert.True(t, utf8.ValidString(reason), "no split character")
			assert.True(t, strings.HasPrefix(tc.reason, reason))
		})
	}
}

func acquireBody(version uint8, lease uint32, nameLen uint16, name string) []byte {
	b := []byte{version, byte(lease >> 24), byte(lease >> 16), byte(lease >> 8), byte(lease), byte(nameLen >> 8), byte(nameLen)}
	return append(b, name...)
}

func TestReadAcquireBody(t *testing.T) {
	cases := []struct {
		desc    string
		body    []byte
		want    error
		version uint8
		name    string
	}{
		{"valid", acquireBody(1, 1000, 3, "abc"), nil, 1, "abc"},
		{"version stops at once", []byte{2}, ErrUnsupportedVersion, 2, ""},
		{"lease zero", acquireBody(1, 0, 1, "a"), ErrInvalidLease, 1, ""},
		{"empty name", acquireBody(1, 1, 0, ""), ErrEmptyName, 1, ""},
		{"too long, name not needed", acquireBody(1, 1, 256, ""), ErrNameTooLong, 1, ""},
		{"invalid UTF-8", acquireBody(1, 1, 1, "\xff"), ErrNameNotUTF8, 1, ""},
		{"truncated header", []byte{1, 0, 0}, io.ErrUnexpectedEOF, 1, ""},
		{"truncated name", acquireBody(1, 1, 5, "ab"), io.ErrUnexpectedEOF, 1, ""},
		{"nothing", nil, io.EOF, 0, ""},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			v, _, name, err := ReadAcquireBody(bytes.NewReader(tc.body))
			assert.ErrorIs(t, err, tc.want)
			if tc.want == nil {
				assert.NoError(t, err)
			}
			assert.Equal(t, tc.version, v)
			assert.Equal(t, tc.name, name)
		})
	}
}

func TestReadAcquireBodyLeavesOversizedNameUnread(t *testing.T) {
	r := bytes.NewReader(append(acquireBody(1, 1, 300, ""), strings.Repeat("z", 300)...))
	_, _, _, err := ReadAcquireBody(r)
	require.ErrorIs(t, err, ErrNameTooLong)
	assert.Equal(t, 300, r.Len(), "the name must not be consumed")
}

func TestReadersAcceptOneByteReads(t *testing.T) {
	frame, err := AppendAcquire(nil, "ロック", 42)
	require.NoError(t, err)
	v, lease, name, err := ReadAcquireBody(iotest.OneByteReader(bytes.NewReader(frame[1:])))
	require.NoError(t, err)
	assert.Equal(t, Version, v)
	assert.Equal(t, uint32(42), lease)
	assert.Equal(t, "ロック", name)

	code, reason, err := ReadErrorBody(iotest.OneByteReader(bytes.NewReader(AppendError(nil, 2, "bye")[1:])))
	require.NoError(t, err)
	assert.Equal(t, uint8(2), code)
	assert.Equal(t, "bye", reason)

	tok, err := ReadAcquiredBody(iotest.HalfReader(bytes.NewReader(AppendAcquired(nil, 77)[1:])))
	require.NoError(t, err)
	assert.Equal(t, uint64(77), tok)
}

func TestReadErrorBodyTruncated(t *testing.T) {
	_, _, err := ReadErrorBody(bytes.NewReader([]byte{0x13, 5, 'a'}))
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
	_, _, err = ReadErrorBody(bytes.NewReader([]byte{0x13}))
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
}

func TestCodeErrAndTemporary(t *testing.T) {
	for c := 0; c <= 0xff; c++ {
		e := CodeErr(uint8(c))
		if e == nil {
			assert.Contains(t, ErrCodeName(uint8(c)), "unknown", "code 0x%02x", c)
			continue
		}
		assert.Equal(t, uint8(c), e.Code)
		assert.Equal(t, c < 0x10, e.Temporary(), "code 0x%02x", c)
		assert.Contains(t, e.Error(), ErrCodeName(uint8(c)))
	}
	assert.Same(t, ErrNotAuthorized, CodeErr(0x18))
	assert.Nil(t, CodeErr(0x09))
	assert.True(t, errors.Is(error(ErrEmptyName), ErrEmptyName))
}

func TestMsgName(t *testing.T) {
	assert.Equal(t, "ACQUIRE", MsgName(MsgAcquire))
	assert.Equal(t, "HEARTBEAT", MsgName(MsgHeartbeat))
	assert.Equal(t, "WAITING", MsgName(MsgWaiting))
	assert.Equal(t, "ACQUIRED", MsgName(MsgAcquired))
	assert.Equal(t, "ERROR", MsgName(MsgError))
	assert.Equal(t, "UNKNOWN(0x7f)", MsgName(0x7f))
}
