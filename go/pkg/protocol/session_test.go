package protocol

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/testspec"
)

// sessionVector is one frame of spec/vectors/frames.json's session
// sections.
type sessionVector struct {
	Desc       string `json:"desc"`
	Type       string `json:"type"`
	LeaseMS    uint32 `json:"lease_ms"`
	Stream     uint32 `json:"stream"`
	MaxStreams uint32 `json:"max_streams"`
	Value      string `json:"value"`
	Code       uint8  `json:"code"`
	Reason     string `json:"reason"`
	Inner      struct {
		Type    string `json:"type"`
		Name    string `json:"name"`
		LeaseMS uint32 `json:"lease_ms"`
		Mode    uint8  `json:"mode"`
		Limit   uint16 `json:"limit"`
		Value   string `json:"value"`
		Epoch   string `json:"epoch"`
		Seq     string `json:"seq"`
		Token   string `json:"token"`
		Hex     string `json:"hex"`
	} `json:"inner"`
	Hex string `json:"hex"`
}

func loadSessionVectors(t *testing.T) (client, server []sessionVector) {
	var doc struct {
		Client []sessionVector `json:"client_valid_session"`
		Server []sessionVector `json:"server_valid_session"`
	}
	testspec.Load(t, "vectors/frames.json", &doc)
	require.NotEmpty(t, doc.Client)
	require.NotEmpty(t, doc.Server)
	return doc.Client, doc.Server
}

// TestSessionClientFrames builds every client frame of a session from its
// fields and compares the bytes.
func TestSessionClientFrames(t *testing.T) {
	client, _ := loadSessionVectors(t)
	for _, v := range client {
		t.Run(v.Desc, func(t *testing.T) {
			var got []byte
			var err error
			switch v.Type {
			case "SESSION":
				got, err = AppendSession(nil, v.LeaseMS)
			case "OPEN":
				got = AppendStreamHeader(nil, MsgOpen, v.Stream)
				in := v.Inner
				switch {
				case in.Type == "WATCH":
					got, err = AppendWatch(got, Watch{Name: in.Name, LeaseMS: in.LeaseMS, Epoch: u64(t, in.Epoch), Seq: u64(t, in.Seq)})
				case in.Value != "":
					got, err = AppendAcquireV3(got, in.Name, in.LeaseMS, in.Mode, in.Limit, []byte(in.Value))
				case in.Mode == ModeShared:
					got, err = AppendAcquireV2(got, in.Name, in.LeaseMS, in.Mode, in.Limit)
				default:
					got, err = AppendAcquire(got, in.Name, in.LeaseMS)
				}
			case "ON":
				got, err = AppendProclaim(AppendStreamHeader(nil, MsgOn, v.Stream), []byte(v.Value))
			case "RELEASE":
				got = AppendStreamHeader(nil, MsgRelease, v.Stream)
			case "HEARTBEAT":
				got = []byte{MsgHeartbeat}
			default:
				t.Fatalf("unknown type %q", v.Type)
			}
			require.NoError(t, err)
			assert.Equal(t, v.Hex, hex.EncodeToString(got))
		})
	}
}

// TestSessionServerFrames reads every server frame of a session, and
// builds it again from what was read.
func TestSessionServerFrames(t *testing.T) {
	_, server := loadSessionVectors(t)
	for _, v := range server {
		t.Run(v.Desc, func(t *testing.T) {
			raw, err := hex.DecodeString(v.Hex)
			require.NoError(t, err)
			f, err := ReadSessionFrame(bufio.NewReader(bytes.NewReader(raw)))
			require.NoError(t, err)
			var again []byte
			switch v.Type {
			case "SESSION_OK":
				assert.Equal(t, v.MaxStreams, f.MaxStreams)
				again = AppendSessionOK(nil, f.MaxStreams)
			case "STREAM":
				assert.Equal(t, v.Stream, f.Stream)
				again = AppendStreamHeader(nil, MsgStream, f.Stream)
				switch v.Inner.Type {
				case "WAITING":
					again = append(again, MsgWaiting)
				case "ACQUIRED":
					assert.Equal(t, u64(t, v.Inner.Token), f.Token)
					again = AppendAcquired(again, f.Token)
				case "EVENT":
					again = AppendEvent(again, &f.Event)
					assert.Equal(t, v.Inner.Hex, hex.EncodeToString(AppendEvent(nil, &f.Event)))
				case "WATCHING":
					assert.Equal(t, u64(t, v.Inner.Epoch), f.Epoch)
					assert.Equal(t, u64(t, v.Inner.Seq), f.Seq)
					again = AppendWatching(again, f.Epoch, f.Seq)
				}
			case "RELEASED":
				assert.Equal(t, v.Stream, f.Stream)
				again = AppendStreamHeader(nil, MsgReleased, f.Stream)
			case "STREAM_END":
				assert.Equal(t, v.Stream, f.Stream)
				assert.Equal(t, v.Code, f.Code)
				assert.Equal(t, v.Reason, f.Reason)
				again = AppendStreamEnd(nil, f.Stream, f.Code, f.Reason)
			case "ALIVE":
				again = []byte{MsgAlive}
			default:
				t.Fatalf("unknown type %q", v.Type)
			}
			assert.Equal(t, v.Hex, hex.EncodeToString(again))
		})
	}
}

// A frame cut after its type byte is an unexpected EOF, not a clean end.
func TestSessionFrameCut(t *testing.T) {
	_, err := ReadSessionFrame(bytes.NewReader([]byte{MsgStream, 0, 0}))
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
	_, err = ReadSessionFrame(bytes.NewReader(nil))
	assert.ErrorIs(t, err, io.EOF)
	_, err = ReadSessionFrame(bytes.NewReader([]byte{MsgWaiting}))
	assert.ErrorContains(t, err, "unknown session message type 0x11")
}
