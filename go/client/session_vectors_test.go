package client

import (
	"encoding/hex"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/client/internal/streams"
	"github.com/monolock/monolock/go/internal/testspec"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// TestClientSessionVectors builds every client frame of
// spec/vectors/frames.json "client_valid_session" the way a session does:
// the ACQUIRE's version chosen from the options, the OPEN, ON and RELEASE
// from the core, with the stream ids it gives out.
func TestClientSessionVectors(t *testing.T) {
	var vec struct {
		Cases []struct {
			Desc    string `json:"desc"`
			Type    string `json:"type"`
			LeaseMS uint32 `json:"lease_ms"`
			Stream  uint32 `json:"stream"`
			Value   string `json:"value"`
			Hex     string `json:"hex"`
			Inner   struct {
				Type    string `json:"type"`
				Name    string `json:"name"`
				LeaseMS uint32 `json:"lease_ms"`
				Mode    uint8  `json:"mode"`
				Limit   uint16 `json:"limit"`
				Value   string `json:"value"`
			} `json:"inner"`
		} `json:"client_valid_session"`
	}
	testspec.Load(t, "vectors/frames.json", &vec)
	require.NotEmpty(t, vec.Cases)
	for _, c := range vec.Cases {
		t.Run(c.Desc, func(t *testing.T) {
			var got []byte
			switch c.Type {
			case "SESSION":
				var err error
				got, err = protocol.AppendSession(nil, c.LeaseMS)
				require.NoError(t, err)
			case "HEARTBEAT":
				core := liveCore(t)
				got = core.Tick(time.Now().Add(time.Hour / 2)).Send // past the interval, before nothing else: the deadline is an hour
			case "OPEN":
				got = openVector(t, c.Stream, c.Inner.Type, c.Inner.Name, c.Inner.LeaseMS, c.Inner.Mode, c.Inner.Limit, c.Inner.Value)
			case "ON":
				core := liveCore(t)
				openUpTo(t, core, c.Stream)
				core.Frame(protocol.SessionFrame{Type: protocol.MsgStream, Stream: c.Stream, Inner: protocol.MsgAcquired, Token: 1}, time.Now())
				proclaim, err := protocol.AppendProclaim(nil, []byte(c.Value))
				require.NoError(t, err)
				_, got = core.Proclaim(c.Stream, proclaim)
			case "RELEASE":
				core := liveCore(t)
				openUpTo(t, core, c.Stream)
				got, _ = core.Release(c.Stream)
			default:
				t.Fatalf("unknown type %q", c.Type)
			}
			require.Equal(t, c.Hex, hex.EncodeToString(got))
		})
	}
}

// liveCore is a session core whose SESSION was answered, with a lease
// long enough that no deadline passes in a test.
func liveCore(t *testing.T) *streams.Core {
	core := streams.New(2 * time.Hour)
	now := time.Now()
	core.Start([]byte{protocol.MsgSession}, now)
	core.Frame(protocol.SessionFrame{Type: protocol.MsgSessionOK, MaxStreams: 10}, now)
	require.Equal(t, streams.Live, core.State())
	return core
}

// openUpTo opens claims until the last one has id last.
func openUpTo(t *testing.T, core *streams.Core, last uint32) {
	acquire, err := protocol.AppendAcquire(nil, "x", 1000)
	require.NoError(t, err)
	for {
		id, _, err := core.OpenClaim(acquire, false)
		require.NoError(t, err)
		if id == last {
			return
		}
	}
}

func openVector(t *testing.T, stream uint32, typ, name string, leaseMS uint32, mode uint8, limit uint16, value string) []byte {
	var inner []byte
	var err error
	if typ == "WATCH" {
		inner, err = protocol.AppendWatch(nil, protocol.Watch{LeaseMS: leaseMS, Name: name})
	} else {
		var opts []AcquireOption
		if mode == protocol.ModeShared {
			opts = append(opts, Shared())
		}
		if limit > 0 {
			opts = append(opts, Limit(int(limit)))
		}
		if value != "" {
			opts = append(opts, Value([]byte(value)))
		}
		o, oerr := applyAcquireOptions(opts)
		require.NoError(t, oerr)
		inner, err = o.frame(name, leaseMS)
	}
	require.NoError(t, err)
	if stream > 1024 {
		// Too many opens to reach through the core: the header it uses.
		return append(protocol.AppendStreamHeader(nil, protocol.MsgOpen, stream), inner...)
	}
	core := liveCore(t)
	if stream > 1 {
		openUpTo(t, core, stream-1)
	}
	var got []byte
	if typ == "WATCH" {
		_, got, err = core.OpenWatch(inner, time.Now())
	} else {
		_, got, err = core.OpenClaim(inner, false)
	}
	require.NoError(t, err)
	return got
}
