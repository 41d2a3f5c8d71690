package client

import (
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/client/internal/watchview"
	"github.com/monolock/monolock/go/internal/testspec"
	"github.com/monolock/monolock/go/pkg/protocol"
)

type watchEventVector struct {
	Kind     string `json:"kind"`
	Epoch    string `json:"epoch"`
	Seq      string `json:"seq"`
	Resync   bool   `json:"resync"`
	Holders  uint32 `json:"holders"`
	Waiters  uint32 `json:"waiters"`
	MS       uint32 `json:"ms"`
	Token    string `json:"token"`
	Arrival  string `json:"arrival"`
	Mode     uint8  `json:"mode"`
	Limit    uint16 `json:"limit"`
	Identity string `json:"identity"`
	Value    string `json:"value"`
	Why      uint8  `json:"why"`
}

var watchEventKinds = map[string]uint8{
	"snapshot": protocol.EventSnapshot, "holder": protocol.EventHolder, "waiter": protocol.EventWaiter,
	"snapshot_end": protocol.EventSnapshotEnd, "granted": protocol.EventGranted, "value": protocol.EventValue,
	"ended": protocol.EventEnded, "held_back": protocol.EventHeldBack, "queued": protocol.EventQueued,
	"left": protocol.EventLeft, "blocked": protocol.EventBlocked,
}

func num(t *testing.T, s string) uint64 {
	t.Helper()
	if s == "" {
		return 0
	}
	n, err := strconv.ParseUint(s, 10, 64)
	require.NoError(t, err)
	return n
}

func (v watchEventVector) event(t *testing.T) protocol.Event {
	kind, ok := watchEventKinds[v.Kind]
	require.True(t, ok, v.Kind)
	e := protocol.Event{Epoch: num(t, v.Epoch), Seq: num(t, v.Seq), Kind: kind, Resync: v.Resync,
		Holders: v.Holders, Waiters: v.Waiters, MS: v.MS, Token: num(t, v.Token), Arrival: num(t, v.Arrival),
		Mode: v.Mode, Limit: v.Limit, Identity: v.Identity, Why: v.Why}
	if v.Value != "" {
		e.Value = []byte(v.Value)
	}
	return e
}

// Every case of spec/vectors/watch.json, fed to the watch core; the
// leader is read as Watch.Leader reads it.
func TestWatchVectors(t *testing.T) {
	var vec struct {
		Cases []struct {
			Name    string `json:"name"`
			LeaseMS int64  `json:"lease_ms"`
			Steps   []struct {
				At           int64             `json:"at"`
				In           string            `json:"in"`
				Event        *watchEventVector `json:"event"`
				Epoch        string            `json:"epoch"`
				Seq          string            `json:"seq"`
				Resume       []string          `json:"resume"`
				Error        string            `json:"error"`
				Known        *bool             `json:"known"`
				ValidUntil   *int64            `json:"valid_until"`
				Holders      []string          `json:"holders"`
				Waiters      []string          `json:"waiters"`
				WaiterValues []string          `json:"waiter_values"`
				Leader       string            `json:"leader"`
			} `json:"steps"`
		} `json:"cases"`
	}
	testspec.Load(t, "vectors/watch.json", &vec)
	require.NotEmpty(t, vec.Cases)
	t0 := time.Unix(1_000_000, 0)
	for _, tc := range vec.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			c := watchview.NewCore(time.Duration(tc.LeaseMS) * time.Millisecond)
			for i, st := range tc.Steps {
				now := t0.Add(time.Duration(st.At) * time.Millisecond)
				where := fmt.Sprintf("step %d (%s at %d)", i+1, st.In, st.At)
				var err error
				switch st.In {
				case "send WATCH", "send HEARTBEAT":
					if st.Resume != nil {
						require.Equal(t, []uint64{num(t, st.Resume[0]), num(t, st.Resume[1])}, []uint64{c.Epoch, c.Seq}, where+": the WATCH resumes from the picture")
					}
					c.Sent(now)
				case "event":
					err = c.Event(st.Event.event(t), now)
				case "watching":
					err = c.Watching(num(t, st.Epoch), num(t, st.Seq))
				case "disconnect":
					c.Disconnected()
				case "check":
				default:
					t.Fatalf("%s: unknown input", where)
				}
				switch st.Error {
				case "":
					require.NoError(t, err, where)
				case "gap":
					require.ErrorIs(t, err, watchview.ErrGap, where)
				case "protocol":
					require.True(t, errors.Is(err, watchview.ErrUnasked), "%s: %v", where, err)
				}
				state := stateOf(c, now)
				if st.Known != nil {
					require.Equal(t, *st.Known, state.Known, where+": known")
				}
				if st.ValidUntil != nil {
					require.Equal(t, t0.Add(time.Duration(*st.ValidUntil)*time.Millisecond), state.ValidUntil, where+": valid_until")
				}
				if st.Holders != nil {
					var got []string
					for _, h := range state.Holders {
						got = append(got, strconv.FormatUint(h.Token, 10))
					}
					require.Equal(t, st.Holders, nonNil(got), where+": holders")
				}
				if st.Waiters != nil {
					var got, values []string
					for _, w := range state.Waiters {
						got = append(got, strconv.FormatUint(w.Arrival, 10))
						values = append(values, string(w.Value))
					}
					require.Equal(t, st.Waiters, nonNil(got), where+": waiters")
					if st.WaiterValues != nil {
						require.Equal(t, st.WaiterValues, values, where+": waiter values")
					}
				}
				if st.Leader != "" {
					require.Equal(t, st.Leader, describeLeader(leaderOf(state, now), now), where+": leader")
				}
			}
		})
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// describeLeader writes an observation in the vectors' words.
func describeLeader(o Observation, now time.Time) string {
	switch o.State {
	case Leading:
		return fmt.Sprintf("leader %d %s", o.Token, o.Value)
	case LeaderHeldBack:
		return fmt.Sprintf("held_back %d %d", o.Token, o.Until.Sub(now).Milliseconds())
	case NoLeader:
		return "none"
	}
	return "unknown"
}
