package base

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/monolock/monolock/go/pkg/protocol"
	"github.com/monolock/monolock/go/testkit/pipe"
)

const (
	msgWatch    = 0x04
	msgEvent    = 0x14
	msgWatching = 0x15
)

// observer is one observe command: a minimal watch (protocol version 3)
// that tells the name's leader whenever what it would say changes.
type observer struct {
	id, name string
	leaseMS  uint64
	servers  []string
	tls      *tls.Config
	bugs     Bugs
	o        *pipe.Writer
	stopped  chan struct{}
	once     sync.Once
	done     chan struct{}

	// The picture, kept across connections for a resume.
	epoch, seq uint64
	started    bool
	holders    []watchHolder
	waiters    []uint64 // arrivals
	blocked    time.Time
	snapshot   *observer // the snapshot being read
	validUntil time.Time
	last       pipe.Event // the last observed event, to tell only changes
}

type watchHolder struct {
	token    uint64
	value    string
	heldBack time.Time
}

func newObserver(c pipe.Command, bugs Bugs, o *pipe.Writer) (*observer, error) {
	name, err := c.LockName()
	if err != nil || c.LeaseMS == nil {
		return nil, errors.New("observe needs a name and lease_ms")
	}
	ob := &observer{id: c.ID, name: name, leaseMS: *c.LeaseMS, servers: c.Servers, bugs: bugs, o: o,
		stopped: make(chan struct{}), done: make(chan struct{})}
	if c.TLS != nil {
		if ob.tls, err = tlsConfig(c.TLS); err != nil {
			return nil, err
		}
	}
	return ob, nil
}

func (ob *observer) emit(ev pipe.Event) {
	ev.ID = ob.id
	ob.o.Emit(ev)
}

// stop ends the observer, once: a release, then the quit.
func (ob *observer) stop() {
	ob.once.Do(func() { close(ob.stopped) })
	<-ob.done
}

// run keeps a watch connection, from server to server, until stop.
func (ob *observer) run() {
	defer close(ob.done)
	for attempt := 0; ; attempt++ {
		ob.connection(ob.servers[attempt%len(ob.servers)])
		select {
		case <-ob.stopped:
			return // a stopped observer tells nothing more
		default:
		}
		ob.validUntil = time.Time{}
		ob.tell()
		d := 50 * time.Millisecond << min(attempt, 5)
		select {
		case <-time.After(d/2 + rand.N(d/2+1)):
		case <-ob.stopped:
			return
		}
	}
}

type watchFrame struct {
	typ        byte
	event      protocol.Event
	epoch, seq uint64
}

// connection runs one watch connection until it fails or stop.
func (ob *observer) connection(addr string) {
	cl := &claim{tls: ob.tls}
	conn, err := cl.dial(addr, 5*time.Second)
	if err != nil {
		return
	}
	defer conn.Close()
	frames, quit := make(chan watchFrame), make(chan struct{})
	defer close(quit)
	go readWatch(conn, frames, quit)

	lease := time.Duration(ob.leaseMS) * time.Millisecond
	timeout := lease * 8 / 10
	watch := []byte{msgWatch, 3}
	watch = binary.BigEndian.AppendUint32(watch, uint32(ob.leaseMS))
	watch = binary.BigEndian.AppendUint16(watch, uint16(len(ob.name)))
	watch = append(watch, ob.name...)
	watch = binary.BigEndian.AppendUint64(watch, ob.epoch)
	watch = binary.BigEndian.AppendUint64(watch, ob.seq)
	sent, inFlight := time.Now(), true
	if _, err := conn.Write(watch); err != nil {
		return
	}
	tick := time.NewTicker(lease / 100) // also how late it notices the end of its picture's validity
	defer tick.Stop()
	for {
		select {
		case f, ok := <-frames:
			if !ok {
				return
			}
			if f.typ == msgWatching {
				if !inFlight || f.epoch != ob.epoch || f.seq != ob.seq {
					return // answers nothing we asked, or vouches for another point
				}
				inFlight, ob.validUntil = false, sent.Add(timeout)
			} else if !ob.apply(f.event) {
				return // a gap: start over
			}
			ob.tell()
		case <-tick.C:
			now := time.Now()
			if inFlight && now.After(sent.Add(timeout)) {
				return
			}
			if !inFlight && now.After(sent.Add(lease/4)) {
				sent, inFlight = now, true
				if _, err := conn.Write([]byte{msgHeartbeat}); err != nil {
					return
				}
			}
			ob.tell() // validity and holds end with time alone
		case <-ob.stopped:
			return
		}
	}
}

// apply takes one event; false: it does not follow the last one.
func (ob *observer) apply(e protocol.Event) bool {
	now := time.Now()
	if s := ob.snapshot; s != nil {
		if e.Epoch != s.epoch || e.Seq != s.seq {
			return false
		}
		switch e.Kind {
		case protocol.EventHolder:
			s.holders = append(s.holders, holderOf(e, now))
		case protocol.EventWaiter:
			s.waiters = append(s.waiters, e.Arrival)
		case protocol.EventSnapshotEnd:
			ob.epoch, ob.seq, ob.holders, ob.waiters, ob.blocked = s.epoch, s.seq, s.holders, s.waiters, s.blocked
			ob.started, ob.snapshot = true, nil
		default:
			return false
		}
		return true
	}
	if e.Kind == protocol.EventSnapshot {
		ob.snapshot = &observer{epoch: e.Epoch, seq: e.Seq, blocked: now.Add(time.Duration(e.MS) * time.Millisecond)}
		return true
	}
	if !ob.started || e.Epoch != ob.epoch || e.Seq != ob.seq+1 {
		return false
	}
	ob.seq = e.Seq
	drop := func(token uint64) {
		ob.holders = slices.DeleteFunc(ob.holders, func(h watchHolder) bool { return h.token == token })
	}
	leave := func(arrival uint64) {
		ob.waiters = slices.DeleteFunc(ob.waiters, func(a uint64) bool { return a == arrival })
	}
	switch e.Kind {
	case protocol.EventGranted:
		leave(e.Arrival)
		ob.holders = append(ob.holders, holderOf(e, now))
	case protocol.EventValue:
		for i := range ob.holders {
			if ob.holders[i].token == e.Token {
				ob.holders[i].value = string(e.Value)
			}
		}
	case protocol.EventEnded:
		drop(e.Token)
	case protocol.EventHeldBack:
		for i := range ob.holders {
			if ob.holders[i].token == e.Token {
				ob.holders[i].heldBack = now.Add(time.Duration(e.MS) * time.Millisecond)
			}
		}
	case protocol.EventQueued:
		if !slices.Contains(ob.waiters, e.Arrival) {
			ob.waiters = append(ob.waiters, e.Arrival)
		}
	case protocol.EventLeft:
		leave(e.Arrival)
	case protocol.EventBlocked:
		if until := now.Add(time.Duration(e.MS) * time.Millisecond); until.After(ob.blocked) {
			ob.blocked = until
		}
	default:
		return false
	}
	return true
}

func holderOf(e protocol.Event, now time.Time) watchHolder {
	h := watchHolder{token: e.Token, value: string(e.Value)}
	if e.MS > 0 {
		h.heldBack = now.Add(time.Duration(e.MS) * time.Millisecond)
	}
	return h
}

// tell emits an observed event if what the observer would say changed.
func (ob *observer) tell() {
	ev := ob.observation(time.Now())
	if ob.last.State == "" && ev.State == pipe.StateUnknown {
		return // the first observed event is the first picture known
	}
	if ev.State == ob.last.State && ev.Token == ob.last.Token && same(ev.Value, ob.last.Value) && same(ev.Candidates, ob.last.Candidates) {
		return
	}
	ob.last = ev
	ob.emit(ev)
}

func (ob *observer) observation(now time.Time) pipe.Event {
	known := ob.started && ob.snapshot == nil && now.Before(ob.validUntil)
	if !known && !(ob.bugs.StaleLeaderAfterSilence && ob.last.State != "") {
		return pipe.Event{Name: pipe.Observed, State: pipe.StateUnknown}
	}
	if !known {
		return ob.last // the bug: what it last said, as if still true
	}
	n := len(ob.waiters)
	ev := pipe.Event{Name: pipe.Observed, State: pipe.StateNone, Candidates: &n}
	if len(ob.holders) > 0 {
		h := ob.holders[0]
		v := h.value
		ev.State, ev.Token, ev.Value = pipe.StateLeader, strconv.FormatUint(h.token, 10), &v
		if !h.heldBack.IsZero() && !ob.bugs.HeldBackAsNone {
			ev.State = pipe.StateHeldBack
		} else if !h.heldBack.IsZero() {
			ev.State, ev.Token, ev.Value = pipe.StateNone, "", nil
		}
		return ev
	}
	if ob.blocked.After(now) {
		ev.State = pipe.StateHeldBack
	}
	return ev
}

func same[T comparable](a, b *T) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

// readWatch turns the byte stream into watch frames until it ends or an
// ERROR (which ends the watch at its type byte) comes.
func readWatch(conn net.Conn, frames chan<- watchFrame, quit <-chan struct{}) {
	defer close(frames)
	br := bufio.NewReader(conn)
	for {
		t, err := br.ReadByte()
		if err != nil {
			return
		}
		f := watchFrame{typ: t}
		switch t {
		case msgEvent:
			if f.event, err = protocol.ReadEventBody(br); err != nil {
				return
			}
		case msgWatching:
			if f.epoch, f.seq, err = protocol.ReadWatchingBody(br); err != nil {
				return
			}
		default:
			return // an ERROR, or a byte no watch gets
		}
		select {
		case frames <- f:
		case <-quit:
			return
		}
	}
}
