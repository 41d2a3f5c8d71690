package protocol

import (
	"bytes"
	"encoding/hex"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// watchVector is one frame of spec/vectors/frames.json's watch sections,
// with every field any kind may carry.
type watchVector struct {
	Desc     string `json:"desc"`
	Type     string `json:"type"`
	Name     string `json:"name"`
	LeaseMS  uint32 `json:"lease_ms"`
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
	Hex      string `json:"hex"`
}

var eventKinds = map[string]uint8{
	"snapshot": EventSnapshot, "holder": EventHolder, "waiter": EventWaiter, "snapshot_end": EventSnapshotEnd,
	"granted": EventGranted, "value": EventValue, "ended": EventEnded, "held_back": EventHeldBack,
	"queued": EventQueued, "left": EventLeft, "blocked": EventBlocked,
}

func u64(t *testing.T, s string) uint64 {
	t.Helper()
	if s == "" {
		return 0
	}
	n, err := strconv.ParseUint(s, 10, 64)
	require.NoError(t, err)
	return n
}

func (v watchVector) event(t *testing.T) Event {
	kind, ok := eventKinds[v.Kind]
	require.True(t, ok, "kind %q", v.Kind)
	e := Event{Epoch: u64(t, v.Epoch), Seq: u64(t, v.Seq), Kind: kind, Resync: v.Resync, Holders: v.Holders,
		Waiters: v.Waiters, MS: v.MS, Token: u64(t, v.Token), Arrival: u64(t, v.Arrival), Mode: v.Mode,
		Limit: v.Limit, Identity: v.Identity, Why: v.Why}
	if v.Value != "" {
		e.Value = []byte(v.Value)
	}
	return e
}

// Every watch frame of the spec, both ways: the fields encode to exactly
// the bytes, and the bytes decode to exactly the fields.
func TestSpecWatchFrames(t *testing.T) {
	var vec struct {
		Client  []watchVector `json:"client_valid_watch"`
		Server  []watchVector `json:"server_valid_watch"`
		Invalid []watchVector `json:"server_invalid_watch"`
	}
	loadSpec(t, "vectors/frames.json", &vec)
	require.NotEmpty(t, vec.Client)
	require.NotEmpty(t, vec.Server)
	require.NotEmpty(t, vec.Invalid)
	for _, v := range vec.Client {
		frame, err := AppendWatch(nil, Watch{LeaseMS: v.LeaseMS, Name: v.Name, Epoch: u64(t, v.Epoch), Seq: u64(t, v.Seq)})
		require.NoError(t, err, v.Desc)
		assert.Equal(t, v.Hex, hexOf(frame), v.Desc)
		w, err := ReadWatchBody(bytes.NewReader(mustHex(t, v.Hex)[1:]))
		require.NoError(t, err, v.Desc)
		assert.Equal(t, Watch{LeaseMS: v.LeaseMS, Name: v.Name, Epoch: u64(t, v.Epoch), Seq: u64(t, v.Seq)}, w, v.Desc)
	}
	for _, v := range vec.Server {
		b := mustHex(t, v.Hex)
		if v.Type == "WATCHING" {
			assert.Equal(t, v.Hex, hexOf(AppendWatching(nil, u64(t, v.Epoch), u64(t, v.Seq))), v.Desc)
			epoch, seq, err := ReadWatchingBody(bytes.NewReader(b[1:]))
			require.NoError(t, err)
			assert.Equal(t, []uint64{u64(t, v.Epoch), u64(t, v.Seq)}, []uint64{epoch, seq}, v.Desc)
			continue
		}
		want := v.event(t)
		assert.Equal(t, v.Hex, hexOf(AppendEvent(nil, &want)), v.Desc)
		require.Equal(t, MsgEvent, b[0])
		got, err := ReadEventBody(bytes.NewReader(b[1:]))
		require.NoError(t, err, v.Desc)
		assert.Equal(t, want, got, v.Desc)
	}
	for _, v := range vec.Invalid {
		_, err := ReadEventBody(bytes.NewReader(mustHex(t, v.Hex)[1:]))
		assert.ErrorIs(t, err, ErrMalformedEvent, v.Desc)
	}
}

func hexOf(b []byte) string { return hex.EncodeToString(b) }
