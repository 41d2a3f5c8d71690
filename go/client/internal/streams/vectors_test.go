package streams

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/client/internal/session"
	"github.com/monolock/monolock/go/internal/testspec"
	"github.com/monolock/monolock/go/pkg/protocol"
)

type streamsVectors struct {
	Cases []struct {
		Name    string `json:"name"`
		LeaseMS uint32 `json:"lease_ms"`
		Steps   []struct {
			At         float64  `json:"at"`
			In         string   `json:"in"`
			Out        []string `json:"out"`
			State      *string  `json:"state"`
			ValidUntil *float64 `json:"valid_until"`
		} `json:"steps"`
	} `json:"cases"`
}

// Every case of spec/vectors/streams.json, fed to the core with a clock
// that starts at the connect.
func TestStreamsVectors(t *testing.T) {
	var vec streamsVectors
	testspec.Load(t, "vectors/streams.json", &vec)
	require.NotEmpty(t, vec.Cases)
	for _, tc := range vec.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			c := New(time.Duration(tc.LeaseMS) * time.Millisecond)
			for i, st := range tc.Steps {
				now := t0.Add(time.Duration(st.At * float64(time.Millisecond)))
				where := fmt.Sprintf("step %d (%s at %v)", i+1, st.In, st.At)
				require.Equal(t, st.Out, feedVector(t, c, tc.LeaseMS, st.In, now), where)
				if st.State != nil {
					require.Equal(t, *st.State, c.State().String(), where)
				}
				if st.ValidUntil != nil {
					got := float64(c.ValidUntil().Sub(t0)) / float64(time.Millisecond)
					require.InDelta(t, *st.ValidUntil, got, 1e-6, where+": valid_until")
				}
			}
		})
	}
}

// feedVector applies one vector input, then ticks the core at the same
// instant, and describes what the core did in the vectors' words.
func feedVector(t *testing.T, c *Core, leaseMS uint32, in string, now time.Time) []string {
	f := strings.Fields(in)
	num := func(i int) uint64 {
		n, err := strconv.ParseUint(strings.TrimPrefix(f[i], "0x"), map[bool]int{true: 16, false: 10}[strings.HasPrefix(f[i], "0x")], 64)
		require.NoError(t, err, in)
		return n
	}
	var a Actions
	switch f[0] {
	case "connect":
		frame, err := protocol.AppendSession(nil, leaseMS)
		require.NoError(t, err)
		a = c.Start(frame, now)
	case "timer":
		a = c.Tick(now)
	case "eof":
		a = c.ConnectionEnded(nil)
	case "close":
		a = c.Close()
	case "open":
		acquire, err := protocol.AppendAcquire(nil, "a", leaseMS)
		require.NoError(t, err)
		id, frame, err := c.OpenClaim(acquire, f[1] == "try")
		if err != nil {
			return []string{"refused"}
		}
		require.Equal(t, protocol.MsgOpen, frame[0])
		a.Send = protocol.AppendStreamHeader(nil, protocol.MsgOpen, id) // described by its header
	case "release":
		frame, released := c.Release(uint32(num(1)))
		a.Send = frame
		if released {
			a.Events = append(a.Events, Event{Stream: uint32(num(1)), Kind: Released})
		}
	case "recv":
		switch f[1] {
		case "SESSION_OK":
			a = c.Frame(protocol.SessionFrame{Type: protocol.MsgSessionOK, MaxStreams: uint32(num(2))}, now)
		case "ALIVE":
			a = c.Frame(protocol.SessionFrame{Type: protocol.MsgAlive}, now)
		case "WAITING":
			a = c.Frame(protocol.SessionFrame{Type: protocol.MsgStream, Stream: uint32(num(2)), Inner: protocol.MsgWaiting}, now)
		case "ACQUIRED":
			a = c.Frame(protocol.SessionFrame{Type: protocol.MsgStream, Stream: uint32(num(2)), Inner: protocol.MsgAcquired, Token: num(3)}, now)
		case "RELEASED":
			a = c.Frame(protocol.SessionFrame{Type: protocol.MsgReleased, Stream: uint32(num(2))}, now)
		case "STREAM_END":
			a = c.Frame(protocol.SessionFrame{Type: protocol.MsgStreamEnd, Stream: uint32(num(2)), Code: uint8(num(3))}, now)
		case "ERROR":
			a = c.ServerError(uint8(num(2)), true, "")
		default:
			t.Fatalf("unknown frame in %q", in)
		}
	default:
		t.Fatalf("unknown input %q", in)
	}
	if !a.Close && f[0] != "timer" {
		more := c.Tick(now)
		a.Events = append(a.Events, more.Events...)
		a.Send = append(a.Send, more.Send...)
		a.Close = more.Close
		a.Ended = cmp.Or(a.Ended, more.Ended)
	}
	return describeVector(a)
}

// describeVector writes actions in the vectors' words and order: the
// tells by stream id, the session's end, the sends, the close.
func describeVector(a Actions) []string {
	out := []string{}
	if a.Ready {
		out = append(out, "ready")
	}
	events := slices.Clone(a.Events)
	slices.SortStableFunc(events, func(x, y Event) int { return cmp.Compare(x.Stream, y.Stream) })
	for _, e := range events {
		switch e.Kind {
		case Waiting:
			out = append(out, fmt.Sprintf("waiting %d", e.Stream))
		case Granted:
			out = append(out, fmt.Sprintf("grant %d %d", e.Stream, e.Token))
		case Released:
			out = append(out, fmt.Sprintf("released %d", e.Stream))
		case Lost:
			out = append(out, fmt.Sprintf("lost %d %s", e.Stream, vectorCause(e.Cause)))
		case Failed:
			out = append(out, fmt.Sprintf("fail %d %s", e.Stream, vectorCause(e.Cause)))
		default:
			out = append(out, fmt.Sprintf("%s %d", e.Kind, e.Stream))
		}
	}
	if a.Ended != nil {
		out = append(out, "ended "+vectorCause(a.Ended))
	}
	for b := a.Send; len(b) > 0; {
		switch b[0] {
		case protocol.MsgSession:
			out, b = append(out, "send SESSION"), b[6:]
		case protocol.MsgHeartbeat:
			out, b = append(out, "send HEARTBEAT"), b[1:]
		case protocol.MsgOpen:
			id := uint32(b[1])<<24 | uint32(b[2])<<16 | uint32(b[3])<<8 | uint32(b[4])
			out, b = append(out, fmt.Sprintf("send OPEN %d", id)), b[5:]
		case protocol.MsgRelease:
			id := uint32(b[1])<<24 | uint32(b[2])<<16 | uint32(b[3])<<8 | uint32(b[4])
			out, b = append(out, fmt.Sprintf("send RELEASE %d", id)), b[5:]
		default:
			return append(out, fmt.Sprintf("send unknown 0x%02x", b[0]))
		}
	}
	if a.Close {
		out = append(out, "close")
	}
	return out
}

func vectorCause(c *Cause) string {
	switch c.Kind {
	case session.CauseTimeout:
		return "timeout"
	case session.CauseIO:
		return "io"
	case session.CauseServer:
		return fmt.Sprintf("server 0x%02x", c.Code)
	case session.CauseProtocol:
		return "protocol"
	case session.CauseBusy:
		return "busy"
	}
	return "?"
}
