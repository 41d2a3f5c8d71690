package streams

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/client/internal/session"
	"github.com/monolock/monolock/go/pkg/protocol"
)

const lease = time.Second

var t0 = time.Unix(1000, 0)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// live returns a core whose SESSION (sent at 0) was answered at 10 ms.
func live(t *testing.T) *Core {
	c := New(lease)
	a := c.Start([]byte{protocol.MsgSession}, at(0))
	require.Equal(t, []byte{protocol.MsgSession}, a.Send)
	a = c.Frame(protocol.SessionFrame{Type: protocol.MsgSessionOK, MaxStreams: 3}, at(10))
	require.True(t, a.Ready)
	require.Equal(t, Live, c.State())
	require.Equal(t, uint32(3), c.MaxStreams())
	return c
}

func acquire(t *testing.T, name string) []byte {
	f, err := protocol.AppendAcquire(nil, name, 1000)
	require.NoError(t, err)
	return f
}

func open(t *testing.T, c *Core, try bool) uint32 {
	id, frame, err := c.OpenClaim(acquire(t, "x"), try)
	require.NoError(t, err)
	require.Equal(t, protocol.MsgOpen, frame[0])
	return id
}

func stream(id uint32, inner uint8, token uint64) protocol.SessionFrame {
	return protocol.SessionFrame{Type: protocol.MsgStream, Stream: id, Inner: inner, Token: token}
}

func kinds(a Actions) []EventKind {
	var k []EventKind
	for _, e := range a.Events {
		k = append(k, e.Kind)
	}
	return k
}

func TestIDsStartAtOneAndGrow(t *testing.T) {
	c := live(t)
	for want := uint32(1); want <= 5; want++ {
		assert.Equal(t, want, open(t, c, false))
	}
	c.lastID = ^uint32(0) - 1
	assert.Equal(t, ^uint32(0), open(t, c, false))
	_, _, err := c.OpenClaim(acquire(t, "x"), false)
	require.ErrorIs(t, err, ErrIDsExhausted)
}

func TestOpenBeforeSessionOKIsRefused(t *testing.T) {
	c := New(lease)
	c.Start([]byte{protocol.MsgSession}, at(0))
	_, _, err := c.OpenClaim(acquire(t, "x"), false)
	require.ErrorIs(t, err, ErrNotLive)
}

func TestHeartbeatScheduleAndDeadline(t *testing.T) {
	c := live(t)
	assert.Equal(t, at(800), c.ValidUntil(), "0.8 x lease from the SESSION's send")
	next := c.NextWakeup()
	assert.True(t, next.Before(at(250)) || next.Equal(at(250)), "a heartbeat within lease/4: %v", next.Sub(t0))
	a := c.Tick(next)
	require.Equal(t, []byte{protocol.MsgHeartbeat}, a.Send)
	// One request in flight: no second heartbeat before its ALIVE.
	assert.Nil(t, c.Tick(next.Add(300*time.Millisecond)).Send)
	c.Frame(protocol.SessionFrame{Type: protocol.MsgAlive}, next.Add(310*time.Millisecond))
	assert.Equal(t, next.Add(800*time.Millisecond), c.ValidUntil(), "valid from the HEARTBEAT's send")
}

func TestDeadlineLosesEveryHeldClaimAndFailsTheRest(t *testing.T) {
	c := live(t)
	h := open(t, c, false)
	w := open(t, c, false)
	r := open(t, c, false)
	c.Frame(stream(h, protocol.MsgAcquired, 7), at(20))
	c.Frame(stream(w, protocol.MsgWaiting, 0), at(20))
	c.Frame(stream(r, protocol.MsgAcquired, 8), at(20))
	frame, done := c.Release(r)
	require.False(t, done)
	require.Equal(t, protocol.MsgRelease, frame[0])

	_, over := c.Poll(at(799))
	require.False(t, over)
	a, over := c.Poll(at(800))
	require.True(t, over)
	got := map[uint32]EventKind{}
	for _, e := range a.Events {
		got[e.Stream] = e.Kind
	}
	assert.Equal(t, map[uint32]EventKind{h: Lost, w: Failed, r: Released}, got)
	require.NotNil(t, a.Ended)
	assert.Equal(t, session.CauseTimeout, a.Ended.Kind)
	assert.False(t, a.Close, "kept open until the lease ends")
	assert.Equal(t, TimedOut, c.State())
	// A late ALIVE revives nothing; the close comes at the lease's end.
	assert.Empty(t, c.Frame(protocol.SessionFrame{Type: protocol.MsgAlive}, at(801)).Events)
	assert.Equal(t, at(1000), c.NextWakeup())
	assert.False(t, c.Tick(at(999)).Close)
	assert.True(t, c.Tick(at(1000)).Close)
}

func TestLateFramesAfterTheDeadlineDoNotGrant(t *testing.T) {
	c := live(t)
	id := open(t, c, false)
	a := c.Frame(stream(id, protocol.MsgAcquired, 1), at(800))
	assert.Equal(t, []EventKind{Failed}, kinds(a), "the deadline is checked before the frame")
}

func TestTryOnWaitingReleasesThenFailsBusy(t *testing.T) {
	c := live(t)
	id := open(t, c, true)
	a := c.Frame(stream(id, protocol.MsgWaiting, 0), at(20))
	assert.Empty(t, a.Events, "busy is told once the server has dropped the claim")
	assert.Equal(t, protocol.AppendStreamHeader(nil, protocol.MsgRelease, id), a.Send)
	// A promotion that crossed the RELEASE is dropped.
	assert.Empty(t, c.Frame(stream(id, protocol.MsgAcquired, 3), at(21)).Events)
	a = c.Frame(protocol.SessionFrame{Type: protocol.MsgReleased, Stream: id}, at(22))
	require.Equal(t, []EventKind{Failed}, kinds(a))
	assert.Equal(t, session.CauseBusy, a.Events[0].Cause.Kind)
	assert.Equal(t, 0, c.Open())
}

func TestWaitingThenGrantedAndProclaimAcks(t *testing.T) {
	c := live(t)
	id := open(t, c, false)
	assert.Equal(t, []EventKind{Waiting}, kinds(c.Frame(stream(id, protocol.MsgWaiting, 0), at(20))))
	seq, on := c.Proclaim(id, []byte{protocol.MsgProclaim, 0, 0})
	require.Equal(t, uint64(1), seq)
	assert.Equal(t, protocol.MsgOn, on[0])
	// Promoted before the ON was read: the grant, then the ON's reply.
	a := c.Frame(stream(id, protocol.MsgAcquired, 9), at(30))
	require.Equal(t, []EventKind{Granted}, kinds(a))
	assert.Equal(t, uint64(9), a.Events[0].Token)
	a = c.Frame(stream(id, protocol.MsgAcquired, 9), at(31))
	require.Equal(t, []EventKind{Proclaimed}, kinds(a))
	assert.Equal(t, uint64(1), a.Events[0].Seq)
	// An unasked reply breaks the protocol and ends the session.
	a = c.Frame(stream(id, protocol.MsgAcquired, 9), at(32))
	require.NotNil(t, a.Ended)
	assert.Equal(t, session.CauseProtocol, a.Ended.Kind)
	assert.Equal(t, []EventKind{Lost}, kinds(a))
	assert.True(t, a.Close)
}

func TestStreamEnd(t *testing.T) {
	c := live(t)
	h := open(t, c, false)
	o := open(t, c, false)
	c.Frame(stream(h, protocol.MsgAcquired, 1), at(20))
	end := func(id uint32, code uint8) Actions {
		return c.Frame(protocol.SessionFrame{Type: protocol.MsgStreamEnd, Stream: id, Code: code, Reason: "r"}, at(30))
	}
	a := end(o, 0x05)
	require.Equal(t, []EventKind{Failed}, kinds(a))
	assert.Equal(t, uint8(0x05), a.Events[0].Cause.Code)
	a = end(h, 0x02)
	require.Equal(t, []EventKind{Lost}, kinds(a))
	assert.Equal(t, Live, c.State(), "a stream's end is not the session's")
	assert.Empty(t, end(h, 0x02).Events, "a frame of an ended stream is dropped")
	a = end(99, 0x02)
	require.NotNil(t, a.Ended, "a stream never opened breaks the protocol")
}

func TestReleaseOfAnEndedStreamSendsNothing(t *testing.T) {
	c := live(t)
	id := open(t, c, false)
	c.Frame(protocol.SessionFrame{Type: protocol.MsgStreamEnd, Stream: id, Code: 2}, at(20))
	frame, done := c.Release(id)
	assert.Nil(t, frame)
	assert.True(t, done)
}

func TestStreamEndCrossingReleaseWaitsForReleased(t *testing.T) {
	c := live(t)
	id := open(t, c, false)
	c.Frame(stream(id, protocol.MsgAcquired, 1), at(20))
	c.Release(id)
	assert.Empty(t, c.Frame(protocol.SessionFrame{Type: protocol.MsgStreamEnd, Stream: id, Code: 2}, at(21)).Events)
	assert.Equal(t, []EventKind{Released}, kinds(c.Frame(protocol.SessionFrame{Type: protocol.MsgReleased, Stream: id}, at(22))))
}

func TestServerErrorEndsEverything(t *testing.T) {
	c := live(t)
	h := open(t, c, false)
	c.Frame(stream(h, protocol.MsgAcquired, 1), at(20))
	a := c.ServerError(0x01, true, "bye")
	require.Equal(t, []EventKind{Lost}, kinds(a))
	assert.True(t, a.Close)
	assert.Equal(t, uint8(0x01), a.Ended.Code)
	assert.Equal(t, Closed, c.State())
}

func TestCloseReleasesEverything(t *testing.T) {
	c := live(t)
	h := open(t, c, false)
	open(t, c, false)
	c.Frame(stream(h, protocol.MsgAcquired, 1), at(20))
	a := c.Close()
	assert.Equal(t, []EventKind{Released, Released}, kinds(a))
	assert.True(t, a.Close)
	assert.Empty(t, c.Close().Events)
}

func TestAliveWithNothingInFlightBreaksTheProtocol(t *testing.T) {
	c := live(t)
	a := c.Frame(protocol.SessionFrame{Type: protocol.MsgAlive}, at(20))
	require.NotNil(t, a.Ended)
	assert.Equal(t, session.CauseProtocol, a.Ended.Kind)
}

func watchFrame(t *testing.T) []byte {
	f, err := protocol.AppendWatch(nil, protocol.Watch{LeaseMS: 1000, Name: "w"})
	require.NoError(t, err)
	return f
}

func TestWatchStreamVouchedByItsWatchingThenByAlive(t *testing.T) {
	c := live(t)
	id, frame, err := c.OpenWatch(watchFrame(t), at(20))
	require.NoError(t, err)
	assert.Equal(t, protocol.MsgOpen, frame[0])
	seq, _ := c.Proclaim(id, []byte{protocol.MsgProclaim, 0, 0})
	assert.Zero(t, seq, "no ON of a watch")

	a := c.Frame(protocol.SessionFrame{Type: protocol.MsgStream, Stream: id, Inner: protocol.MsgEvent}, at(30))
	assert.Equal(t, []EventKind{WatchEvent}, kinds(a))
	a = c.Frame(protocol.SessionFrame{Type: protocol.MsgStream, Stream: id, Inner: protocol.MsgWatching, Epoch: 4, Seq: 2}, at(31))
	require.Equal(t, []EventKind{WatchStarted}, kinds(a))
	assert.Equal(t, at(20), a.Events[0].At, "vouched as of the OPEN's send")
	assert.Equal(t, uint64(4), a.Events[0].Epoch)

	hb := c.NextWakeup()
	require.NotNil(t, c.Tick(hb).Send)
	// A watch opened after the HEARTBEAT's send is not vouched by its ALIVE.
	late, _, err := c.OpenWatch(watchFrame(t), hb.Add(time.Millisecond))
	require.NoError(t, err)
	c.Frame(protocol.SessionFrame{Type: protocol.MsgStream, Stream: late, Inner: protocol.MsgWatching}, hb.Add(2*time.Millisecond))
	a = c.Frame(protocol.SessionFrame{Type: protocol.MsgAlive}, hb.Add(3*time.Millisecond))
	require.Equal(t, []EventKind{WatchAlive}, kinds(a))
	assert.Equal(t, id, a.Events[0].Stream)
	assert.Equal(t, hb, a.Events[0].At)

	// One WATCHING per watch stream: a second breaks the protocol.
	a = c.Frame(protocol.SessionFrame{Type: protocol.MsgStream, Stream: id, Inner: protocol.MsgWatching, Epoch: 4, Seq: 2}, hb.Add(4*time.Millisecond))
	require.NotNil(t, a.Ended)
	assert.Equal(t, []EventKind{Failed, Failed}, kinds(a), "the session's end ends its watches")
}

func TestWatchStreamEnd(t *testing.T) {
	c := live(t)
	id, _, err := c.OpenWatch(watchFrame(t), at(20))
	require.NoError(t, err)
	a := c.Frame(protocol.SessionFrame{Type: protocol.MsgStreamEnd, Stream: id, Code: 0x04}, at(30))
	require.Equal(t, []EventKind{Failed}, kinds(a))
	assert.Equal(t, Live, c.State(), "a watch that fell behind ends alone")
}
