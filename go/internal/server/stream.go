package server

import (
	"errors"
	"time"

	"github.com/monolock/monolock/go/internal/claims"
	"github.com/monolock/monolock/go/internal/sessionlimit"
	"github.com/monolock/monolock/go/internal/watch"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// stream is one claim or watch of a session of streams. A claim's stream
// is its claims.Sink: a grant or an end reaches its client as a frame in
// the session's queue.
type stream struct {
	m     *streamSession
	id    uint32
	claim claims.Claim   // its id is the server's own, unique in the run
	watch *watch.Watcher // nil for a claim
	place sessionlimit.Place

	// Guarded by m.mu.
	state streamState
	// What came for a claim while it was being admitted, applied once it
	// is: the ONs to answer (with the last one's value), and the RELEASEs
	// (the first releases it; each is answered).
	ons      int
	value    []byte
	releases int
	endWhy   uint8 // a stream in m.ends: how its holding ends once told
}

type streamState uint8

const (
	streamAdmitting streamState = iota // its OPEN waits for the admitter
	streamLive                         // in the table (or watching)
	streamEnded                        // released or ended: frames for it are dropped
)

// stateFrame is the STREAM frame with st's state: ACQUIRED with its token
// once granted, else WAITING.
func (st *stream) stateFrame() []byte {
	frame := protocol.AppendStreamHeader(make([]byte, 0, 14), protocol.MsgStream, st.id)
	if tok := st.claim.Token(); tok != 0 {
		return protocol.AppendAcquired(frame, tok)
	}
	return append(frame, protocol.MsgWaiting)
}

// Granted queues the ACQUIRED of a promotion (claims.Sink). A claim still
// being admitted is told by its admission's reply, which comes after the
// token is set; one that ended is not told.
func (st *stream) Granted(token uint64) bool {
	m := st.m
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.ended || st.state == streamEnded:
		return false
	case st.state == streamAdmitting:
		return true
	}
	m.queueLocked(protocol.AppendAcquired(protocol.AppendStreamHeader(nil, protocol.MsgStream, st.id), token))
	m.signal()
	return true
}

// End ends the claim for code (a kick, no token to give): its STREAM_END
// is queued, and the writer releases the claim once that is written, so
// the client hears before anyone else is granted the lock (claims.Sink).
// The session lives on.
func (st *stream) End(code *protocol.Error, reason string) bool {
	m := st.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ended || m.endReq != nil || st.state == streamEnded {
		return false
	}
	if reason == "" {
		reason = protocol.ErrCodeName(code.Code)
	}
	m.dropLocked(st)
	st.endWhy = endReason(code)
	m.queueLocked(protocol.AppendStreamEnd(nil, st.id, code.Code, reason))
	m.ends = append(m.ends, st)
	m.signal()
	return true
}

// Peer describes the client for the listing (claims.Sink).
func (st *stream) Peer() (remote, identity string) { return st.m.ss.Peer() }

// admission is an OPEN of a claim waiting for the admitter.
type admission struct {
	st  *stream
	req claims.Request
}

// startAdmission registers st as being admitted and admits it: at once
// on the reader when nothing can make it wait and no earlier OPEN waits,
// else through the admitter, started if none runs, so that a lease record
// write stalls only the claims behind it, never the session's heartbeats
// and releases (a token block wait holds the lock table itself: see
// docs/how-it-works.md).
func (m *streamSession) startAdmission(st *stream, req claims.Request) {
	atOnce := m.env.claims.AdmitsAtOnce(req.Lease) // a hint: a write may start right after
	m.mu.Lock()
	m.streams[st.id] = st
	atOnce = atOnce && !m.admitter
	if !atOnce {
		m.admits = append(m.admits, admission{st, req})
		if !m.admitter {
			m.admitter = true
			m.admitted.Add(1)
			go m.admitAll()
		}
	}
	m.mu.Unlock()
	if atOnce {
		m.admit(st, req)
	}
}

// admitAll admits the queued claims in their order of arrival, until none
// is left.
func (m *streamSession) admitAll() {
	defer m.admitted.Done()
	for {
		m.mu.Lock()
		if len(m.admits) == 0 {
			m.admitter = false
			m.mu.Unlock()
			return
		}
		next := m.admits[0]
		m.admits[0] = admission{}
		m.admits = m.admits[1:]
		m.mu.Unlock()
		m.admit(next.st, next.req)
	}
}

// admit admits st's claim and queues its reply, then applies what came
// for it meanwhile (ONs, a RELEASE).
func (m *streamSession) admit(st *stream, req claims.Request) {
	err := m.env.claims.Admit(&st.claim, req)
	m.mu.Lock()
	if err != nil {
		live := st.state == streamAdmitting
		if live {
			m.dropLocked(st)
			if !errors.Is(err, claims.ErrEnded) {
				m.queueLocked(streamEndFor(st.id, err))
			}
		}
		releases := st.releases
		m.mu.Unlock()
		if live {
			m.answerReleases(st.id, releases)
		}
		m.env.claims.Detach(&st.claim, st.place, true, time.Time{})
		m.flush()
		return
	}
	if st.state == streamEnded {
		m.mu.Unlock() // kicked meanwhile: its STREAM_END is its reply
		return
	}
	st.state = streamLive
	m.queueLocked(st.stateFrame())
	ons, value, releases := st.ons, st.value, st.releases
	st.ons, st.value = 0, nil
	m.mu.Unlock()
	if ons > 0 {
		m.env.claims.Proclaim(&st.claim, value)
		for range ons {
			m.replyState(st)
		}
	}
	if releases > 0 {
		m.mu.Lock()
		live := st.state == streamLive // else a kick ended it meanwhile
		if live {
			m.dropLocked(st)
		}
		m.mu.Unlock()
		if live {
			m.releaseStream(st, protocol.EndReleased)
		}
		m.answerReleases(st.id, releases)
	}
	m.flush() // the reply at once, without waking the writer
}

// answerReleases queues a RELEASED for each of n RELEASEs of stream id.
func (m *streamSession) answerReleases(id uint32, n int) {
	for range n {
		m.queue(protocol.AppendStreamHeader(nil, protocol.MsgReleased, id))
	}
}
