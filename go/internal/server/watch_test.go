package server

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// watcher is a test's watch connection, reading EVENT, WATCHING and
// ERROR frames.
type watcher struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func watchName(t *testing.T, addr, name string, leaseMS uint32, epoch, seq uint64) *watcher {
	t.Helper()
	c := dial(t, addr)
	frame, err := protocol.AppendWatch(nil, protocol.Watch{LeaseMS: leaseMS, Name: name, Epoch: epoch, Seq: seq})
	require.NoError(t, err)
	c.send(frame)
	return &watcher{t: t, conn: c.conn, r: bufio.NewReader(c.conn)}
}

// watchFrame is one server frame of a watch.
type watchFrame struct {
	Type       uint8
	Event      protocol.Event
	Epoch, Seq uint64 // WATCHING
	Code       uint8  // ERROR
}

func (f watchFrame) String() string {
	switch f.Type {
	case protocol.MsgEvent:
		return fmt.Sprintf("EVENT(kind %d seq %d token %d)", f.Event.Kind, f.Event.Seq, f.Event.Token)
	case protocol.MsgWatching:
		return fmt.Sprintf("WATCHING(seq %d)", f.Seq)
	case protocol.MsgError:
		return fmt.Sprintf("ERROR(0x%02x)", f.Code)
	}
	return protocol.MsgName(f.Type)
}

func (w *watcher) read(d time.Duration) (watchFrame, error) {
	_ = w.conn.SetReadDeadline(time.Now().Add(d))
	t, err := w.r.ReadByte()
	if err != nil {
		return watchFrame{}, err
	}
	f := watchFrame{Type: t}
	switch t {
	case protocol.MsgEvent:
		f.Event, err = protocol.ReadEventBody(w.r)
	case protocol.MsgWatching:
		f.Epoch, f.Seq, err = protocol.ReadWatchingBody(w.r)
	case protocol.MsgError:
		f.Code, _, err = protocol.ReadErrorBody(w.r)
	default:
		err = fmt.Errorf("unexpected message type 0x%02x", t)
	}
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return f, err
}

func (w *watcher) next() watchFrame {
	w.t.Helper()
	f, err := w.read(replyTimeout)
	require.NoError(w.t, err, "waiting for a watch frame")
	return f
}

// event returns the next frame, which must be an EVENT of kind.
func (w *watcher) event(kind uint8) protocol.Event {
	w.t.Helper()
	f := w.next()
	require.Equal(w.t, protocol.MsgEvent, f.Type, "got %v", f)
	require.Equal(w.t, kind, f.Event.Kind, "got %v", f)
	return f.Event
}

// snapshot reads a whole snapshot: its head, holders, waiters and end.
func (w *watcher) snapshot() (head protocol.Event, holders, waiters []protocol.Event) {
	w.t.Helper()
	head = w.event(protocol.EventSnapshot)
	for range head.Holders {
		holders = append(holders, w.event(protocol.EventHolder))
	}
	for range head.Waiters {
		waiters = append(waiters, w.event(protocol.EventWaiter))
	}
	end := w.event(protocol.EventSnapshotEnd)
	require.Equal(w.t, head.Seq, end.Seq, "a snapshot's events carry one seq")
	w.watching(head.Epoch, head.Seq)
	return head, holders, waiters
}

// watching reads the next frame, which must be WATCHING at (epoch, seq).
func (w *watcher) watching(epoch, seq uint64) {
	w.t.Helper()
	f := w.next()
	require.Equal(w.t, protocol.MsgWatching, f.Type, "got %v", f)
	require.Equal(w.t, epoch, f.Epoch)
	require.Equal(w.t, seq, f.Seq)
}

func (w *watcher) heartbeat() {
	w.t.Helper()
	_ = w.conn.SetWriteDeadline(time.Now().Add(replyTimeout))
	_, err := w.conn.Write([]byte{protocol.MsgHeartbeat})
	require.NoError(w.t, err)
}

func acquireV3(t *testing.T, c *client, name string, leaseMS uint32, value string) {
	t.Helper()
	frame, err := protocol.AppendAcquireV3(nil, name, leaseMS, protocol.ModeExclusive, 0, []byte(value))
	require.NoError(t, err)
	c.send(frame)
}

// A watcher of a free name gets an empty snapshot, then every change in
// order, each event numbered one after the last: a grant with its value
// and holder, a waiter, a new value, the release and the next grant. A
// HEARTBEAT's WATCHING names the last event sent.
func TestWatchTellsEveryChangeInOrder(t *testing.T) {
	srv := startServer(t, Config{DataDir: t.TempDir()})
	w := watchName(t, srv.addr, "leader", 5000, 0, 0)
	head, holders, waiters := w.snapshot()
	assert.NotZero(t, head.Epoch)
	assert.False(t, head.Resync)
	assert.Empty(t, holders)
	assert.Empty(t, waiters)
	seq := head.Seq

	next := func(kind uint8) protocol.Event {
		t.Helper()
		e := w.event(kind)
		require.Equal(t, head.Epoch, e.Epoch)
		require.Equal(t, seq+1, e.Seq, "every event follows the last one")
		seq = e.Seq
		return e
	}

	a, b := dial(t, srv.addr), dial(t, srv.addr)
	acquireV3(t, a, "leader", 5000, "10.0.0.7:80")
	tokA := a.expectAcquired()
	g := next(protocol.EventGranted)
	assert.Equal(t, tokA, g.Token)
	assert.Equal(t, "10.0.0.7:80", string(g.Value))
	assert.Equal(t, a.conn.LocalAddr().String(), g.Identity, "an anonymous holder is named by its address")

	acquireV3(t, b, "leader", 5000, "10.0.0.8:80")
	b.expectWaiting()
	q := next(protocol.EventQueued)
	assert.Equal(t, "10.0.0.8:80", string(q.Value))

	proclaim, err := protocol.AppendProclaim(nil, []byte("10.0.0.7:81"))
	require.NoError(t, err)
	a.send(proclaim)
	a.expectAcquired()
	v := next(protocol.EventValue)
	assert.Equal(t, tokA, v.Token)
	assert.Equal(t, "10.0.0.7:81", string(v.Value))

	require.NoError(t, a.conn.Close())
	tokB := b.expectAcquired()
	end := next(protocol.EventEnded)
	assert.Equal(t, tokA, end.Token)
	assert.Equal(t, protocol.EndReleased, end.Why)
	g = next(protocol.EventGranted)
	assert.Equal(t, tokB, g.Token)
	assert.Equal(t, q.Arrival, g.Arrival, "the grant names the waiter it was")

	w.heartbeat()
	w.watching(head.Epoch, seq)
}

// A watch of a name in use starts with its whole state: the holder and
// the queue in order, with values, under the seq of the last event.
func TestWatchSnapshotHasHoldersAndQueue(t *testing.T) {
	srv := startServer(t, Config{DataDir: t.TempDir()})
	holder := dial(t, srv.addr)
	acquireV3(t, holder, "job", 5000, "h")
	tok := holder.expectAcquired()
	for _, v := range []string{"w1", "w2"} {
		c := dial(t, srv.addr)
		acquireV3(t, c, "job", 5000, v)
		c.expectWaiting()
	}
	w := watchName(t, srv.addr, "job", 5000, 0, 0)
	_, holders, waiters := w.snapshot()
	require.Len(t, holders, 1)
	assert.Equal(t, tok, holders[0].Token)
	assert.Equal(t, "h", string(holders[0].Value))
	assert.Zero(t, holders[0].MS, "a live holder is not held back")
	require.Len(t, waiters, 2)
	assert.Equal(t, "w1", string(waiters[0].Value))
	assert.Equal(t, "w2", string(waiters[1].Value))
	assert.Less(t, waiters[0].Arrival, waiters[1].Arrival)

	locks := srv.Server.LockListing()
	require.Len(t, locks, 1)
	assert.Equal(t, 1, locks[0].Watchers, "the listing counts the live watches")
	require.NoError(t, w.conn.Close())
	require.Eventually(t, func() bool { return srv.Server.LockListing()[0].Watchers == 0 }, replyTimeout, 10*time.Millisecond)
}

// A watcher that comes back with its (epoch, seq) gets exactly the events
// it missed; one with an epoch the server does not know gets a snapshot
// marked resync.
func TestWatchResumesOrResyncs(t *testing.T) {
	srv := startServer(t, Config{DataDir: t.TempDir()})
	w := watchName(t, srv.addr, "r", 5000, 0, 0)
	head, _, _ := w.snapshot()
	a := dial(t, srv.addr)
	a.acquire("r", 5000)
	a.expectAcquired()
	g := w.event(protocol.EventGranted)
	require.NoError(t, w.conn.Close())

	require.NoError(t, a.conn.Close()) // missed: ended
	b := dial(t, srv.addr)
	b.acquire("r", 5000)
	tokB := b.expectGranted() // missed: granted (queued first, if a's close came after)

	back := watchName(t, srv.addr, "r", 5000, head.Epoch, g.Seq)
	var again protocol.Event
	ended := false
	for seq := g.Seq + 1; again.Token == 0; seq++ {
		f := back.next()
		require.Equal(t, protocol.MsgEvent, f.Type, "got %v: no snapshot, the missed events", f)
		require.Equal(t, seq, f.Event.Seq)
		switch f.Event.Kind {
		case protocol.EventEnded:
			assert.Equal(t, g.Token, f.Event.Token)
			ended = true
		case protocol.EventGranted:
			require.True(t, ended, "the end before the next grant")
			again = f.Event
		}
	}
	assert.Equal(t, tokB, again.Token)
	back.watching(head.Epoch, again.Seq)

	stranger := watchName(t, srv.addr, "r", 5000, head.Epoch+2, 1)
	h, holders, _ := stranger.snapshot()
	assert.True(t, h.Resync)
	assert.Equal(t, again.Seq, h.Seq)
	require.Len(t, holders, 1)
	assert.Equal(t, tokB, holders[0].Token)
}

// A holder whose connection is reset is held back, never "no holder":
// the watcher sees the hold with its length, then its end, then the next
// grant.
func TestWatchShowsAResetHolderHeldBack(t *testing.T) {
	srv := startServer(t, Config{DataDir: t.TempDir()})
	w := watchName(t, srv.addr, "h", 5000, 0, 0)
	w.snapshot()
	a, b := dial(t, srv.addr), dial(t, srv.addr)
	a.acquire("h", 600)
	tokA := a.expectAcquired()
	w.event(protocol.EventGranted)
	b.acquire("h", 5000)
	b.expectWaiting()
	w.event(protocol.EventQueued)

	require.NoError(t, a.conn.SetLinger(0))
	require.NoError(t, a.conn.Close()) // a reset
	hb := w.event(protocol.EventHeldBack)
	assert.Equal(t, tokA, hb.Token)
	assert.Equal(t, protocol.HoldReset, hb.Why)
	assert.NotZero(t, hb.MS)
	assert.LessOrEqual(t, hb.MS, uint32(600))
	end := w.event(protocol.EventEnded)
	assert.Equal(t, protocol.EndReset, end.Why)
	tokB := b.expectAcquired()
	assert.Equal(t, tokB, w.event(protocol.EventGranted).Token)
}

// A watcher that reads too slowly is cut off with ERROR 0x04 after every
// event queued before it fell behind: none is skipped.
func TestWatchCutsOffASlowWatcher(t *testing.T) {
	srv := startServer(t, Config{DataDir: t.TempDir()})
	w := watchName(t, srv.addr, "slow", 60_000, 0, 0)
	a := dial(t, srv.addr)
	acquireV3(t, a, "slow", 60_000, "v")
	a.expectAcquired()
	value := make([]byte, protocol.MaxValueLen)
	proclaim, err := protocol.AppendProclaim(nil, value)
	require.NoError(t, err)
	// 30 MB of events in pipelined batches, far faster than the watcher
	// reads while they are made (a few hundred KB/s): its queue passes
	// 1 MiB beyond what the sockets buffer. The watcher keeps reading
	// meanwhile, so the server's writer is never stalled long enough for
	// its write timeout, however slow the machine.
	const events, batch = 30_000, 500
	produced := make(chan error, 1)
	go func() {
		burst := bytes.Repeat(proclaim, batch)
		for range events / batch {
			if _, err := a.conn.Write(burst); err != nil {
				produced <- err
				return
			}
			for range batch {
				if f, err := a.read(replyTimeout); err != nil || f.Type != protocol.MsgAcquired {
					produced <- fmt.Errorf("reply to a PROCLAIM: %v %v", f, err)
					return
				}
			}
		}
		produced <- nil
	}()
	_, _, _ = w.snapshot()
	seq, done := uint64(0), false
	for n := 0; ; n++ {
		if !done && n%50 == 0 {
			select {
			case err := <-produced:
				require.NoError(t, err)
				done = true // read at full speed from here on
			case <-time.After(100 * time.Millisecond):
			}
		}
		f := w.next()
		if f.Type == protocol.MsgError {
			assert.Equal(t, protocol.ErrWatcherBehind.Code, f.Code)
			break
		}
		require.Equal(t, protocol.MsgEvent, f.Type)
		if seq != 0 {
			require.Equal(t, seq+1, f.Event.Seq, "no event skipped")
		}
		seq = f.Event.Seq
	}
	assert.Greater(t, seq, uint64(100))
	assert.Less(t, seq, uint64(events), "cut off before the end")
	if !done {
		require.NoError(t, <-produced)
	}
}

// A watcher that stops heartbeating is closed once its lease has run out;
// a stopping server ends every watch with ERROR 0x01.
func TestWatchLeaseAndShutdown(t *testing.T) {
	srv := startServer(t, Config{DataDir: t.TempDir()})
	silent := watchName(t, srv.addr, "x", 300, 0, 0)
	silent.snapshot()
	_, err := silent.read(10 * time.Second)
	require.Truef(t, isClosed(err), "want close, got %v", err)

	w := watchName(t, srv.addr, "x", 60_000, 0, 0)
	w.snapshot()
	go func() { _ = srv.Server.Shutdown(t.Context()) }()
	f := w.next()
	require.Equal(t, protocol.MsgError, f.Type, "got %v", f)
	assert.Equal(t, protocol.ErrShuttingDown.Code, f.Code)
}

// A watch is validated as an ACQUIRE is: a bad version or name is an
// ERROR with its code; anything but a HEARTBEAT after it is 0x13.
func TestWatchValidation(t *testing.T) {
	srv := startServer(t, Config{DataDir: t.TempDir()})
	c := dial(t, srv.addr)
	c.send([]byte{protocol.MsgWatch, 9})
	c.expectError(protocol.ErrUnsupportedVersion)

	c = dial(t, srv.addr)
	c.send([]byte{protocol.MsgWatch, 3, 0, 0, 3, 0xe8, 0, 0})
	c.expectError(protocol.ErrEmptyName)

	w := watchName(t, srv.addr, "v", 5000, 0, 0)
	w.snapshot()
	_, err := w.conn.Write([]byte{protocol.MsgAcquire})
	require.NoError(t, err)
	f := w.next()
	require.Equal(t, protocol.MsgError, f.Type, "got %v", f)
	assert.Equal(t, protocol.ErrUnknownMessage.Code, f.Code)
}

// A semaphore is watched as an exclusive lock is: its holders come with
// their mode and limit, and a permit's release and the next grant follow.
func TestWatchASemaphore(t *testing.T) {
	srv := startServer(t, Config{DataDir: t.TempDir()})
	permit := func() *client {
		c := dial(t, srv.addr)
		frame, err := protocol.AppendAcquireV2(nil, "pool", 5000, protocol.ModeShared, 2)
		require.NoError(t, err)
		c.send(frame)
		return c
	}
	a, b := permit(), permit()
	a.expectAcquired()
	b.expectAcquired()
	w := watchName(t, srv.addr, "pool", 5000, 0, 0)
	_, holders, _ := w.snapshot()
	require.Len(t, holders, 2)
	for _, h := range holders {
		assert.Equal(t, protocol.ModeShared, h.Mode)
		assert.Equal(t, uint16(2), h.Limit)
	}
	c := permit()
	c.expectWaiting()
	q := w.event(protocol.EventQueued)
	assert.Equal(t, protocol.ModeShared, q.Mode)
	require.NoError(t, a.conn.Close())
	c.expectAcquired()
	assert.Equal(t, protocol.EndReleased, w.event(protocol.EventEnded).Why)
	g := w.event(protocol.EventGranted)
	assert.Equal(t, q.Arrival, g.Arrival)
	assert.Equal(t, uint16(2), g.Limit)
}
