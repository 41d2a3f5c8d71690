package server

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/testspec"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// serverInvalid mirrors "server_invalid" of spec/vectors/frames.json.
type vectorReply struct {
	Type   string  `json:"type"`
	Code   *uint8  `json:"code"`
	Reason *string `json:"reason"`
}

type serverInvalid struct {
	Cases []struct {
		Desc         string        `json:"desc"`
		SendHex      string        `json:"send_hex"`
		Replies      []vectorReply `json:"replies"`
		SplitReplies []vectorReply `json:"split_replies"`
		Then         string        `json:"then"`
	} `json:"cases"`
}

func loadServerInvalid(t *testing.T) serverInvalid {
	t.Helper()
	return loadServerInvalidFrom(t, testspec.Read(t, "vectors/frames.json"))
}

func loadServerInvalidFrom(t testing.TB, raw []byte) serverInvalid {
	t.Helper()
	var doc struct {
		ServerInvalid serverInvalid `json:"server_invalid"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.NotEmpty(t, doc.ServerInvalid.Cases)
	return doc.ServerInvalid
}

var msgTypes = map[string]uint8{
	"WAITING":  protocol.MsgWaiting,
	"ACQUIRED": protocol.MsgAcquired,
	"ERROR":    protocol.MsgError,
}

// TestServerInvalidVectors sends every server_invalid case to a fresh server,
// once coalesced in a single write and once split into one-byte writes, and
// checks the replies and the close.
func TestServerInvalidVectors(t *testing.T) {
	vectors := loadServerInvalid(t)
	for _, mode := range []string{"coalesced", "split"} {
		for _, tc := range vectors.Cases {
			t.Run(mode+"/"+tc.Desc, func(t *testing.T) {
				t.Parallel()
				srv := startServer(t, Config{})
				send, err := hex.DecodeString(tc.SendHex)
				require.NoError(t, err)
				c := dial(t, srv.addr)
				if mode == "split" {
					c.sendSplit(send)
				} else {
					c.send(send)
				}
				// Bytes written one at a time may still arrive together
				// (a loaded machine schedules the server late), so with
				// split_replies the last ones are optional: at least
				// replies, at most split_replies.
				replies, required := tc.Replies, len(tc.Replies)
				if mode == "split" && tc.SplitReplies != nil {
					replies = tc.SplitReplies
				}
				var token uint64
				for i, want := range replies {
					var got frame
					if i < required {
						got = c.next()
					} else if got, err = c.read(time.Second); err != nil {
						require.True(t, errors.Is(err, os.ErrDeadlineExceeded), "optional reply %d: %v", i, err)
						break
					}
					require.Equal(t, msgTypes[want.Type], got.Type, "reply %d: got %v", i, got)
					if want.Code != nil {
						assert.Equal(t, *want.Code, got.Code, "reply %d: got %v", i, got)
					}
					if want.Reason != nil {
						assert.Equal(t, *want.Reason, got.Reason, "reply %d", i)
					} else if got.Type == protocol.MsgError {
						// Without a detailed reason the canonical text is sent.
						assert.Equal(t, protocol.ErrCodeName(got.Code), got.Reason)
					}
					if got.Type == protocol.MsgAcquired {
						if token != 0 {
							assert.Equal(t, token, got.Token, "every ACQUIRED of a session carries its token")
						}
						token = got.Token
					}
				}
				if tc.Then == "open" {
					c.expectSilence(100 * time.Millisecond)
				} else {
					c.expectClosed()
				}
			})
		}
	}
}

// An ERROR is answered at the byte that decides it: the server must not wait
// for bytes that would complete a frame of some other layout.
func TestErrorsAnsweredWithoutWaitingForMoreBytes(t *testing.T) {
	srv := startServer(t, Config{})
	for _, tc := range []struct {
		send []byte
		code *protocol.Error
	}{
		{[]byte{0x01, 0x07}, protocol.ErrUnsupportedVersion},
		{[]byte{0x01, 0x01, 0, 0, 0x03, 0xe8, 0x01, 0x00}, protocol.ErrNameTooLong},
		{[]byte{0x01, 0x01, 0, 0, 0, 0, 0x00, 0x05}, protocol.ErrInvalidLease},
	} {
		c := dial(t, srv.addr)
		c.send(tc.send)
		c.expectError(tc.code)
		c.expectClosed()
	}
}

// A partial frame is not answered: the server waits for the rest.
func TestPartialAcquireWaitsForTheRest(t *testing.T) {
	srv := startServer(t, Config{})
	frame := acquireFrame(t, "partial", 60000)
	c := dial(t, srv.addr)
	c.send(frame[:len(frame)-1])
	c.expectSilence(150 * time.Millisecond)
	c.send(frame[len(frame)-1:])
	assert.Equal(t, uint64(1), c.expectAcquired())
}

func TestSplitFramesEveryByteInItsOwnWrite(t *testing.T) {
	srv := startServer(t, Config{})
	name := "ロック/äö/🔒" // multibyte characters split across reads
	holder := dial(t, srv.addr)
	holder.sendSplit(acquireFrame(t, name, 60000))
	tok := holder.expectAcquired()

	waiter := dial(t, srv.addr)
	waiter.sendSplit(acquireFrame(t, name, 60000))
	waiter.expectWaiting()
	waiter.sendSplit([]byte{protocol.MsgHeartbeat})
	waiter.expectWaiting()

	holder.sendSplit([]byte{protocol.MsgHeartbeat})
	assert.Equal(t, tok, holder.expectAcquired())
}

func TestCoalescedHeartbeatsAnsweredOnce(t *testing.T) {
	srv := startServer(t, Config{})
	holder := dial(t, srv.addr)
	batch := acquireFrame(t, "batch", 60000)
	for i := 0; i < 20; i++ {
		batch = append(batch, protocol.MsgHeartbeat)
	}
	holder.send(batch)
	tok := holder.expectAcquired()
	assert.Equal(t, tok, holder.expectAcquired(), "one reply for the run of heartbeats")

	waiter := dial(t, srv.addr)
	waiter.send(append(acquireFrame(t, "batch", 60000), 2, 2, 2))
	waiter.expectWaiting()
	waiter.expectWaiting()
	holder.expectSilence(50 * time.Millisecond)
	waiter.expectSilence(50 * time.Millisecond)
}

// Valid names of every shape from the client vectors are accepted as sent.
func TestClientValidAcquiresAreGranted(t *testing.T) {
	raw := testspec.Read(t, "vectors/frames.json")
	var doc struct {
		ClientValid []struct {
			Type string `json:"type"`
			Hex  string `json:"hex"`
		} `json:"client_valid"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	srv := startServer(t, Config{})
	var want uint64
	for _, v := range doc.ClientValid {
		if v.Type != "ACQUIRE" {
			continue
		}
		b, err := hex.DecodeString(v.Hex)
		require.NoError(t, err)
		c := dial(t, srv.addr)
		c.send(b)
		want++
		assert.Equal(t, want, c.expectAcquired(), "distinct names, fresh grants: %s", v.Hex)
	}
	require.NotZero(t, want)
}

type denyAll struct{}

func (denyAll) Authorize(_ net.Conn, name string) error { return fmt.Errorf("%q is not yours", name) }

func TestAuthorizerRunsAfterNameValidation(t *testing.T) {
	srv := startServer(t, Config{Authorizer: denyAll{}})
	c := dial(t, srv.addr)
	c.send([]byte{0x01, 0x01, 0, 0, 0x03, 0xe8, 0x00, 0x01, 0xff})
	c.expectError(protocol.ErrNameNotUTF8)
	c.expectClosed()

	c = dial(t, srv.addr)
	c.acquire("secret", 1000)
	f := c.expectError(protocol.ErrNotAuthorized)
	assert.Contains(t, f.Reason, `"secret" is not yours`)
	c.expectClosed()
	assert.Empty(t, srv.Locks())
}

// With MaxLease, a longer lease is refused with 0x17 and a reason that
// gives both numbers; a lease at the limit is granted.
func TestMaxLeaseRefusesLongerLeases(t *testing.T) {
	srv := startServer(t, Config{MaxLease: time.Minute})
	c := dial(t, srv.addr)
	c.acquire("long", 60001)
	f := c.expectError(protocol.ErrInvalidLease)
	assert.Equal(t, "lease 60001 ms is above this server's maximum of 60000 ms", f.Reason)
	c.expectClosed()
	ok := dial(t, srv.addr)
	ok.acquire("long", 60000)
	ok.expectAcquired()
	assert.Empty(t, waitersOf(srv, "long"))
}

// Heartbeats pipelined in one write get one reply for the burst, not one
// write each, and are counted; a later single heartbeat gets its own.
func TestHeartbeatBurstGetsOneReply(t *testing.T) {
	obs := newCountingObserver()
	srv := startServer(t, Config{Observer: obs})
	c := dial(t, srv.addr)
	c.acquire("burst", 60000)
	tok := c.expectAcquired()
	burst := make([]byte, 50)
	for i := range burst {
		burst[i] = protocol.MsgHeartbeat
	}
	c.send(burst)
	assert.Equal(t, tok, c.expectAcquired())
	c.expectSilence(100 * time.Millisecond)
	assert.Equal(t, 49, obs.snapshot().bursts)
	c.heartbeat()
	assert.Equal(t, tok, c.expectAcquired())
}
