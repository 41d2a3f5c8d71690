package server

import (
	"time"

	"github.com/monolock/monolock/go/internal/claims"
	"github.com/monolock/monolock/go/internal/watch"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// A watch is a session whose first frame is WATCH (protocol version 3):
// it claims nothing, and gets its name's state, then every change. It has
// two goroutines: the reader answers HEARTBEATs (through the watcher's
// queue, so that a WATCHING comes after the events it covers), and the
// writer writes the queue out. A watch counts against the session limits
// like any connection, and never enters the lease record.

// watchState is what a session that watches has beyond a claim's.
type watchState struct {
	w    *watch.Watcher
	stop chan struct{} // closed when the session ends: the writer returns
}

// startWatch reads the WATCH after its type byte and subscribes the
// session to its name: the snapshot (or the events since the watcher's
// point) is queued before it returns.
func (ss *session) startWatch(hs *handshakeInput) error {
	req, err := protocol.ReadWatchBody(hs)
	if err != nil {
		return err
	}
	hs.lastSeen = time.Now()
	hs.lease = time.Duration(req.LeaseMS) * time.Millisecond
	ss.watch = &watchState{w: watch.NewWatcher(), stop: make(chan struct{})}
	return ss.env.claims.Watch(ss.watch.w, claims.WatchRequest{Name: req.Name, Epoch: req.Epoch, Seq: req.Seq, Conn: ss.conn})
}

// stopWatch ends the session's watch; its writer returns. Called once,
// by end.
func (ss *session) stopWatch() {
	ss.env.claims.Unwatch(ss.watch.w)
	close(ss.watch.stop)
}

// watchHeartbeats is a watch's reader: it starts the writer, then answers
// HEARTBEATs until the lease runs out after the last one, the peer closes,
// or it sends anything else (ERROR 0x13).
func (ss *session) watchHeartbeats(hs *handshakeInput) {
	in, lastSeen, lease := hs.in, hs.lastSeen, hs.lease
	src := source{conn: ss.conn, spill: &hs.in.buf}
	go ss.watchWriter()
	until, err := ss.watchBeat(&in, &src, lastSeen, lease)
	ss.finish(err, until)
}

func (ss *session) watchBeat(in *input, src *source, lastSeen time.Time, lease time.Duration) (until time.Time, err error) {
	for {
		until = lastSeen.Add(lease)
		if err := ss.conn.SetReadDeadline(until); err != nil {
			return until, err
		}
		if ss.ended() {
			return until, errFinished
		}
		t, err := in.readByte(src)
		if err != nil {
			return until, ss.readFailed(err)
		}
		if t != protocol.MsgHeartbeat {
			return until, unknownType(t)
		}
		lastSeen = time.Now()
		if extra := in.skipBuffered(protocol.MsgHeartbeat); extra > 0 {
			ss.env.obs.HeartbeatBurst(extra)
		}
		if err := ss.env.claims.MayAcknowledge(); err != nil {
			return until, err
		}
		ss.env.claims.Acknowledge(ss.watch.w)
	}
}

// watchWriter writes the watcher's queue out, each batch in one write,
// until the session ends. Every batch passes the leadership check a grant
// passes, so a server that stopped leading its cell shows no stale holder:
// it ends the watch with ERROR 0x03 instead. A watcher that fell behind
// gets what was queued before it did, then ERROR 0x04.
func (ss *session) watchWriter() {
	w := ss.watch.w
	for {
		select {
		case <-w.Ready():
		case <-ss.watch.stop:
			return
		}
		frames, behind := w.Take()
		if err := ss.env.claims.MayAcknowledge(); err != nil {
			ss.endWith(err)
			return
		}
		if len(frames) > 0 && !ss.writeFrames(frames) {
			return
		}
		if behind {
			ss.endAndHandOver(protocol.ErrWatcherBehind, "")
			return
		}
	}
}

// writeFrames writes frames unless the session has ended, and reports
// whether it did; a failed write closes the connection (its reader then
// ends the session).
func (ss *session) writeFrames(frames []byte) bool {
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	if ss.ended() {
		return false
	}
	if err := ss.writeLocked(frames); err != nil {
		ss.conn.Close()
		return false
	}
	return true
}

// endWith ends the session with err's ERROR.
func (ss *session) endWith(err error) {
	code, reason, _ := wireCode(err)
	ss.endAndHandOver(code, reason)
}
