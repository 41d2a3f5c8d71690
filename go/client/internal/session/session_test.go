package session

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/testspec"
	"github.com/monolock/monolock/go/pkg/protocol"
)

type sessionVectors struct {
	Cases []struct {
		Name    string `json:"name"`
		LeaseMS uint32 `json:"lease_ms"`
		Mode    string `json:"mode"`
		Claim   *struct {
			Shared bool   `json:"shared"`
			Limit  uint16 `json:"limit"`
			Value  string `json:"value"`
		} `json:"claim"`
		Steps []struct {
			At         float64  `json:"at"`
			In         string   `json:"in"`
			Out        []string `json:"out"`
			State      *string  `json:"state"`
			ValidUntil *float64 `json:"valid_until"`
		} `json:"steps"`
	} `json:"cases"`
}

// Every case of spec/vectors/session.json, fed to the core with a clock
// that starts at the connect.
func TestSessionVectors(t *testing.T) {
	var vec sessionVectors
	testspec.Load(t, "vectors/session.json", &vec)
	require.NotEmpty(t, vec.Cases)
	for _, tc := range vec.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			acquire, err := protocol.AppendAcquire(nil, "a", tc.LeaseMS)
			switch {
			case tc.Claim != nil && tc.Claim.Value != "":
				acquire, err = protocol.AppendAcquireV3(nil, "a", tc.LeaseMS, protocol.ModeExclusive, 0, []byte(tc.Claim.Value))
			case tc.Claim != nil && tc.Claim.Shared:
				acquire, err = protocol.AppendAcquireV2(nil, "a", tc.LeaseMS, protocol.ModeShared, tc.Claim.Limit)
			}
			require.NoError(t, err)
			lease := time.Duration(tc.LeaseMS) * time.Millisecond
			c := New(acquire, lease, tc.Mode == "try")
			t0 := time.Unix(1_000_000, 0)
			for i, st := range tc.Steps {
				now := t0.Add(time.Duration(st.At * float64(time.Millisecond)))
				proclaimed := c.Proclaimed()
				acts := feed(t, c, acquire, st.In, now)
				where := fmt.Sprintf("step %d (%s at %v)", i+1, st.In, st.At)
				require.Equal(t, st.Out, describe(acts, c, proclaimed), where)
				if len(acts.Send) > 0 && acts.Send[0] == protocol.MsgAcquire {
					require.Equal(t, acquire, acts.Send, where+": the claim's own ACQUIRE")
				}
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

// feed applies one vector input, then ticks the core at the same instant,
// as spec/vectors/session.json says a core whose API separates input from
// time is driven (Receive already ticks; a second tick is a no-op).
func feed(t *testing.T, c *Core, acquire []byte, in string, now time.Time) Actions {
	var acts Actions
	f := strings.Fields(in)
	switch f[0] {
	case "connect":
		acts = c.Start(now)
		require.Equal(t, acquire, acts.Send)
	case "timer":
		return c.Tick(now)
	case "release":
		return c.Release()
	case "proclaim":
		frame, err := protocol.AppendProclaim(nil, []byte(f[1]))
		require.NoError(t, err)
		c.Proclaim(frame)
	case "eof":
		return c.ConnectionEnded(nil)
	case "recv":
		var b []byte
		switch f[1] {
		case "WAITING":
			b = []byte{protocol.MsgWaiting}
		case "ACQUIRED":
			tok, err := strconv.ParseUint(f[2], 10, 64)
			require.NoError(t, err)
			b = protocol.AppendAcquired(nil, tok)
		case "ERROR":
			code, err := strconv.ParseUint(strings.TrimPrefix(f[2], "0x"), 16, 8)
			require.NoError(t, err)
			b = protocol.AppendError(nil, uint8(code), "")
		case "hex":
			var err error
			b, err = hex.DecodeString(strings.Join(f[2:], ""))
			require.NoError(t, err)
		}
		acts = c.Receive(b, now)
	default:
		t.Fatalf("unknown input %q", in)
	}
	if !acts.Close {
		more := c.Tick(now)
		acts.merge(more)
	}
	return acts
}

// describe writes actions in the vectors' words, in the order they are
// taken: tell, send, close. proclaimed is the core's count of acknowledged
// PROCLAIMs before the step.
func describe(a Actions, c *Core, proclaimed uint64) []string {
	out := []string{}
	if a.Waiting {
		out = append(out, "waiting")
	}
	if a.Granted {
		out = append(out, fmt.Sprintf("grant %d", c.Token()))
	}
	if c.Proclaimed() != proclaimed {
		out = append(out, fmt.Sprintf("proclaimed %d", c.Proclaimed()))
	}
	if a.Lost != nil {
		out = append(out, "lost "+cause(a.Lost))
	}
	if a.Failed != nil {
		out = append(out, "fail "+cause(a.Failed))
	}
	switch {
	case a.Send == nil:
	case a.Send[0] == protocol.MsgHeartbeat:
		out = append(out, "send HEARTBEAT")
	case a.Send[0] == protocol.MsgProclaim:
		value, err := protocol.ReadProclaimBody(bytes.NewReader(a.Send[1:]))
		if err != nil {
			return append(out, "send a broken PROCLAIM: "+err.Error())
		}
		out = append(out, "send PROCLAIM "+string(value))
	default:
		out = append(out, "send ACQUIRE")
	}
	if a.Close {
		out = append(out, "close")
	}
	return out
}

func cause(c *Cause) string {
	switch c.Kind {
	case CauseTimeout:
		return "timeout"
	case CauseIO:
		return "io"
	case CauseServer:
		if !c.Coded {
			return "server"
		}
		return fmt.Sprintf("server 0x%02x", c.Code)
	case CauseProtocol:
		return "protocol"
	case CauseBusy:
		return "busy"
	}
	return "?"
}

// A byte that starts no server message, once the server has spoken, is a
// protocol violation naming the byte (before that, CauseNotMonolock).
func TestUnknownTypeIsAProtocolError(t *testing.T) {
	acquire, err := protocol.AppendAcquire(nil, "a", 1000)
	require.NoError(t, err)
	c := New(acquire, time.Second, false)
	now := time.Unix(1_000_000, 0)
	c.Start(now)
	c.Receive([]byte{protocol.MsgWaiting}, now)
	acts := c.Receive([]byte("HTTP/1.1 400"), now)
	require.NotNil(t, acts.Failed)
	require.Equal(t, CauseProtocol, acts.Failed.Kind)
	require.Contains(t, acts.Failed.Reason, "0x48")
}

// A PROCLAIM is a request like a HEARTBEAT: sent when nothing is in
// flight (at once, not when a heartbeat would be due), owed one reply that
// refreshes the lease, and acknowledged by that reply; one handed in while
// a request is in flight waits for its reply, and a newer value replaces
// one not sent yet.
func TestProclaimIsARequestLikeAHeartbeat(t *testing.T) {
	acquire, err := protocol.AppendAcquireV3(nil, "a", 10000, protocol.ModeExclusive, 0, []byte("v1"))
	require.NoError(t, err)
	c := New(acquire, 10*time.Second, false)
	t0 := time.Unix(1_000_000, 0)
	p1, _ := protocol.AppendProclaim(nil, []byte("v2"))
	require.Zero(t, c.Proclaim(p1), "nothing to proclaim before the reply to the ACQUIRE")

	c.Start(t0)
	c.Receive(protocol.AppendAcquired(nil, 7), t0.Add(time.Millisecond))
	require.Equal(t, Held, c.State())

	seq := c.Proclaim(p1)
	require.Equal(t, uint64(1), seq)
	now := t0.Add(10 * time.Millisecond)
	require.False(t, c.NextWakeup().After(now), "wakes at once, not when a heartbeat is due")
	acts := c.Tick(now)
	require.Equal(t, p1, acts.Send)
	require.Zero(t, c.Proclaimed())

	// Handed in while the first is in flight: waits for its reply.
	p2, _ := protocol.AppendProclaim(nil, []byte("v3"))
	p3, _ := protocol.AppendProclaim(nil, []byte("v4"))
	require.Equal(t, uint64(2), c.Proclaim(p2))
	require.Equal(t, uint64(3), c.Proclaim(p3))
	require.Nil(t, c.Tick(now.Add(time.Millisecond)).Send, "one request in flight at most")

	acks := now.Add(2 * time.Millisecond)
	acts = c.Receive(protocol.AppendAcquired(nil, 7), acks)
	require.Equal(t, uint64(1), c.Proclaimed())
	require.Equal(t, p3, acts.Send, "the newest value, right after the reply")
	require.Equal(t, now.Add(c.Schedule().ClientTimeout()), c.ValidUntil(), "the reply to a PROCLAIM refreshes as a heartbeat's does")

	c.Receive(protocol.AppendAcquired(nil, 7), acks.Add(time.Millisecond))
	require.Equal(t, uint64(3), c.Proclaimed(), "the value of 2 was replaced by 3's")
	require.Nil(t, c.Tick(acks.Add(2*time.Millisecond)).Send, "then heartbeats on their schedule")
}
