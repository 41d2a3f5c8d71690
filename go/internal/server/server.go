// Package server is the monolock lock server: it accepts TCP connections,
// speaks the wire protocol of pkg/protocol on each, and keeps the lock table.
//
// The server is in three layers that call one way: this package is the
// connection layer (bytes in, frames out, deadlines, TLS, drain, the
// session limits), package claims the claim layer (admission, the lease
// record, holds, hand-over, listing), and package locktable decides grants.
// A claim reaches back to its connection only through its claims.Sink,
// which a session implements. See docs/how-it-works.md.
//
// A connection whose first frame is ACQUIRE is one session and one claim on
// one lock (protocol versions 1 to 3); one whose first frame is SESSION
// (version 4) carries many claims and watches, each a stream (streams.go).
// Each single-claim session has a
// single reader goroutine at a time (the one that reads the ACQUIRE hands
// over to a fresh one, with the minimum stack, for the heartbeats) and no
// timers of its own: the handshake timeout and the lease are read deadlines
// on the connection. Frames to a session are written by its reader (replies)
// and by whichever goroutine promotes it (the unsolicited ACQUIRED); a
// per-session mutex serialises them.
//
// Hooks for the operator features: Serve takes any net.Listener (wrap it
// with tls.NewListener for TLS; the TCP connection underneath keeps the
// TCP_NODELAY that package net sets on every TCP connection),
// Config.Authorizer decides which peer may take which name (ERROR 0x18),
// Locks and Sessions feed an admin listing or metrics, and Kick ends one
// session with ERROR 0x02. Connection limits are applied in startSession,
// before the session exists; an Observer sees the events that metrics count.
package server

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/monolock/monolock/go/internal/claims"
	"github.com/monolock/monolock/go/internal/leaserecord"
	"github.com/monolock/monolock/go/internal/listing"
	"github.com/monolock/monolock/go/internal/locktable"
	"github.com/monolock/monolock/go/internal/lograte"
	"github.com/monolock/monolock/go/internal/sessionlimit"
	"github.com/monolock/monolock/go/internal/tokenstore"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// DefaultHandshakeTimeout is how long a new connection may take to send its
// complete ACQUIRE before it is closed without a message.
const DefaultHandshakeTimeout = 10 * time.Second

// Authorizer decides whether the peer on conn may claim the lock name (see
// claims.Authorizer); an error ends the session with ERROR 0x18.
type Authorizer = claims.Authorizer

// Config configures a Server. The zero value of every optional field is a
// sensible default.
type Config struct {
	DataDir          string        // token high-water mark lives here; created if missing
	HandshakeTimeout time.Duration // 0 = default 10s
	Logger           *slog.Logger  // nil = discard

	// Authorizer, if set, is asked for every ACQUIRE that passed validation.
	Authorizer Authorizer

	// MaxSessions caps open sessions and MaxSessionsPerAddr caps those from
	// one client address; 0 means no limit. A connection over a limit is
	// closed before any byte is read or written: the client sees a
	// connection failure, which it treats as temporary.
	MaxSessions        int
	MaxSessionsPerAddr int
	// PerAddrIPv6Prefix is how many leading bits of an IPv6 address count
	// as one client address for MaxSessionsPerAddr: one host usually has a
	// whole /64 to pick addresses from. 0 means DefaultPerAddrIPv6Prefix;
	// 128 counts each address on its own. IPv4 addresses count one by one.
	PerAddrIPv6Prefix int

	// LockDelay, if positive, keeps the lock of a holder that went silent
	// (its lease ran out) from being granted to the next waiter for this
	// long, as in Chubby: for resources that cannot check fencing tokens.
	// A holder that closes its connection or is kicked releases at once.
	LockDelay time.Duration

	// MaxStreams caps the streams a session (protocol version 4) may have
	// open at once; 0 means protocol.DefaultMaxStreams. Every stream also
	// counts against MaxSessions and MaxSessionsPerAddr.
	MaxStreams int

	// Observer, if set, is told of grants, expiries, errors and refusals.
	Observer Observer

	// MaxLease, if positive, refuses an ACQUIRE whose lease is longer
	// (ERROR 0x17, terminal): the protocol allows leases of up to 49.7
	// days, and a holder whose machine vanishes keeps its lock that long.
	MaxLease time.Duration

	// Tokens, if set, issues the fencing tokens instead of a store in
	// DataDir (an HA cell keeps its high-water mark in etcd), and Gate says
	// whether this server is the cell's active one. Both come from package ha.
	Tokens Tokens
	Gate   Gate

	// TokenFloor makes every token issued larger than this, whatever the
	// data directory's mark says: the operator's way to restart a used
	// directory whose mark was lost (--token-floor).
	TokenFloor uint64

	// tokenBlock overrides the token store's block size, tokenRetry the
	// interval between failed reservations, tokenStarve its wait for a
	// reservation under way, namedLease the lease record's threshold for
	// leases recorded by name (tests).
	tokenBlock  uint64
	tokenRetry  time.Duration
	tokenStarve time.Duration
	namedLease  time.Duration
}

// Server is a monolock server. Create it with New, run it with Serve, stop it
// with Shutdown.
type Server struct {
	// sessionEnv is what the sessions use: the claim layer (claims),
	// obs, log, handshakeTimeout.
	sessionEnv
	maxSessions int
	maxPerAddr  int
	tokens      Tokens
	gate        Gate // nil: always active (a single server)
	// restartUntil is when a restarted server may grant again (see
	// afterRestart); zero on a first start. Locks that must wait longer
	// are held back by name (claims.Registry.HoldName).
	restartUntil time.Time
	// limits counts the places of the session limits (held by
	// connections, and by held-back claims after theirs).
	limits *sessionlimit.Limits

	// What a peer can cause at will, without credentials: counted, and
	// logged at a bounded rate.
	noise NoiseObserver
	lines noisyLines
	sleep func(time.Duration) // time.Sleep; tests record the accept back-off

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	sessions  map[uint64]*session
	lastID    uint64
	shutdown  bool
	ended     chan struct{} // closed when shutdown began and the last session ended
	drained   chan struct{} // closed after ended, once the stop is recorded

	sessionsWG sync.WaitGroup // one per live session reader
}

// New opens the token store in cfg.DataDir and returns a server ready to Serve.
func New(cfg Config) (*Server, error) {
	if cfg.DataDir == "" && cfg.Tokens == nil {
		return nil, errors.New("server: no data directory")
	}
	if cfg.HandshakeTimeout < 0 {
		return nil, fmt.Errorf("server: negative handshake timeout %v", cfg.HandshakeTimeout)
	}
	if cfg.HandshakeTimeout == 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.PerAddrIPv6Prefix < 0 || cfg.PerAddrIPv6Prefix > 128 {
		return nil, fmt.Errorf("server: IPv6 prefix for the per-address limit must be 1 to 128 (0: the default), got %d", cfg.PerAddrIPv6Prefix)
	}
	if cfg.MaxSessions < 0 || cfg.MaxSessionsPerAddr < 0 || cfg.LockDelay < 0 || cfg.MaxLease < 0 || cfg.MaxStreams < 0 {
		return nil, errors.New("server: negative limit or lock delay")
	}
	obs := cfg.Observer
	if obs == nil {
		obs = nopObserver{}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Server{
		sessionEnv: sessionEnv{obs: obs, log: log, handshakeTimeout: cfg.HandshakeTimeout,
			maxStreams: cmp.Or(cfg.MaxStreams, protocol.DefaultMaxStreams)},
		gate:        cfg.Gate,
		maxSessions: cfg.MaxSessions,
		maxPerAddr:  cfg.MaxSessionsPerAddr,
		limits: sessionlimit.New(cfg.MaxSessions, cfg.MaxSessionsPerAddr,
			cmp.Or(cfg.PerAddrIPv6Prefix, DefaultPerAddrIPv6Prefix)),
		tokens:    cfg.Tokens,
		listeners: make(map[net.Listener]struct{}),
		sessions:  make(map[uint64]*session),
		ended:     make(chan struct{}),
		drained:   make(chan struct{}),
	}
	var leases *leaserecord.Record
	var heldBack map[string]time.Time
	if s.tokens == nil {
		// The store calls back into s (tokens ready again, or failing):
		// not before its first block is reserved, which Open does before
		// it returns, and s.claims is set right after.
		store, err := tokenstore.Open(cfg.DataDir, tokenstore.Options{
			BlockSize:  cfg.tokenBlock,
			Floor:      cfg.TokenFloor,
			RetryEvery: cfg.tokenRetry,
			StarveWait: cfg.tokenStarve,
			OnReady:    s.Regrant,
			OnFailure:  s.TokenFailure,
		})
		if err != nil {
			return nil, err
		}
		leases, err = leaserecord.Open(cfg.DataDir, leaserecord.Options{NamedLease: cfg.namedLease, FreshDir: store.Fresh()})
		if err != nil {
			store.Close()
			return nil, err
		}
		s.restartUntil, heldBack = leases.Inherited()
		s.tokens = afterRestart(store, s.restartUntil)
		logRestartWait(log, s.restartUntil, heldBack)
	}
	s.noise, _ = obs.(NoiseObserver)
	if s.noise == nil {
		s.noise = nopNoise{}
	}
	holds, _ := obs.(HoldObserver)
	if holds == nil {
		holds = nopHolds{}
	}
	var gate claims.Gate
	if cfg.Gate != nil {
		gate = cfg.Gate // not a typed nil
	}
	s.claims = claims.New(claims.Config{
		Table: locktable.New(s.tokens), Record: leases, Gate: gate,
		Authorizer: cfg.Authorizer, MaxLease: cfg.MaxLease, LockDelay: cfg.LockDelay,
		Observer: obs, Holds: holds, Log: log,
	})
	s.forget = s.forgetSession
	s.newID = s.newClaimID
	s.takePlace = s.limits.Take
	s.lines = newNoisyLines(log)
	s.sleep = time.Sleep
	if wait := time.Until(s.restartUntil); wait > 0 {
		// Started only now that s is complete: Regrant runs on the timer's
		// goroutine. It fires after the tokens' wait, which began earlier.
		time.AfterFunc(wait, s.Regrant)
	}
	for name, until := range heldBack {
		s.claims.HoldName(name, until, protocol.BlockRestart)
	}
	if leases != nil {
		s.holdPermits(leases.InheritedPermits())
	}
	return s, nil
}

// Gate decides, in an HA cell, whether this server is the active one
// (claims.Gate), and describes the cell.
type Gate interface {
	claims.Gate
	// Status describes the cell as this server sees it.
	Status() CellStatus
}

// CellStatus is an HA server's view of its cell, for operators.
type CellStatus struct {
	Role   string        `json:"role"`   // "leader" (the active server) or "follower"
	Leader string        `json:"leader"` // the active server's advertised address, "" if unknown
	Grace  time.Duration `json:"-"`      // a new leader's wait before its first grant
}

// Cell returns the HA status; ok is false for a server that is not part of
// an HA cell.
func (s *Server) Cell() (st CellStatus, ok bool) {
	if s.gate == nil {
		return CellStatus{}, false
	}
	return s.gate.Status(), true
}

// sessionsLocked returns the open sessions, to end them outside s.mu.
// Caller holds s.mu.
func (s *Server) sessionsLocked() []*session {
	sessions := make([]*session, 0, len(s.sessions))
	for _, sess := range s.sessions {
		sessions = append(sessions, sess)
	}
	return sessions
}

// StepDown ends every session with ERROR 0x01 (reason names why) and keeps
// listening: an HA server that is no longer active. Its gate and tokens
// already refuse, so nobody is promoted meanwhile.
func (s *Server) StepDown(reason string) {
	s.mu.Lock()
	sessions := s.sessionsLocked()
	s.mu.Unlock()
	// What the next leader does is in no history of ours: a watcher that
	// comes back here later starts a new epoch.
	s.claims.ForgetHistories()
	for _, sess := range sessions {
		go sess.endAndHandOver(protocol.ErrShuttingDown, reason)
	}
}

// Regrant hands out the locks whose waiters could not get a token while
// the token source had none; the source calls it once tokens are back.
func (s *Server) Regrant() { s.claims.Regrant() }

// holdPermits keeps the permits that the previous run's clean stop left
// held back taken, each until its own end: claims that fit beside them
// are granted meanwhile, unlike on a name held back whole.
func (s *Server) holdPermits(permits map[string]leaserecord.Permits) {
	for name, p := range permits {
		for _, until := range p.Until {
			s.lastID++
			if err := s.claims.HoldPermit(s.lastID, name, p.Limit, until); err != nil {
				s.claims.HoldName(name, until, protocol.BlockRestart) // never shorter
			}
		}
		s.log.Debug("started: permits held back for holders of the previous run", "lock", name, "permits", len(p.Until), "limit", p.Limit)
	}
}

// HoldBack keeps name from being granted until until, for a new leader of
// an HA cell: a holder under the previous leader may still count on it.
func (s *Server) HoldBack(name string, until time.Time) {
	s.claims.HoldName(name, until, protocol.BlockFailover)
}

// TokenFailure reports a failed token reservation. The store retries once
// per interval, so this logs at most that often; waiters stay queued.
func (s *Server) TokenFailure(err error) { s.claims.TokenFailure(err) }

// Serve accepts connections on ln until Shutdown, then returns nil. Any other
// accept failure that is not temporary is returned. Serve closes ln.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
		ln.Close()
	}()

	var backoff acceptBackoff
	for {
		conn, err := ln.Accept()
		if err != nil {
			if s.isShutdown() {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporary(err) {
				// Out of file descriptors and the like: wait and retry
				// rather than spin or give up (as net/http does).
				wait := backoff.next(time.Now())
				s.noise.AcceptFailed()
				s.lines.accept.Log("err", err, "in", wait)
				s.sleep(wait)
				continue
			}
			return err
		}
		s.startSession(conn)
	}
}

// isTemporary reports accept errors worth retrying (EMFILE, ECONNABORTED...).
func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

func (s *Server) isShutdown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shutdown
}

// startSession registers conn as a session and starts its reader.
func (s *Server) startSession(conn net.Conn) {
	// Frames are tiny and latency-bound and must never wait to be
	// coalesced: package net enables TCP_NODELAY on every *net.TCPConn it
	// creates (accepted ones included), so that costs no system call here.
	// TestAcceptedConnectionsUseTCPNoDelay pins it.
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		// Too late to serve: the same answer every other session got.
		_ = conn.SetWriteDeadline(time.Now().Add(writeTimeout))
		_, _ = conn.Write(protocol.AppendError(nil, protocol.ErrShuttingDown.Code, errText(protocol.ErrShuttingDown)))
		s.obs.ErrorSent(protocol.ErrShuttingDown.Code)
		conn.Close()
		return
	}
	place, reason := s.limits.Take(conn.RemoteAddr())
	if reason != "" {
		s.mu.Unlock()
		// Before any reply: the client sees a failed connection, which it
		// retries like any temporary failure.
		s.log.Debug("connection refused", "remote", conn.RemoteAddr(), "reason", reason)
		s.obs.Refused(reason)
		if reason == RefusedMaxSessions {
			s.lines.maxSessions.Log("max_sessions", s.maxSessions)
		} else {
			s.lines.perAddr.Log("max_sessions_per_addr", s.maxPerAddr, "remote", conn.RemoteAddr())
		}
		conn.Close()
		return
	}
	s.lastID++
	sess := newSession(&s.sessionEnv, s.lastID, conn, place)
	s.sessions[sess.id()] = sess
	s.sessionsWG.Add(1)
	s.mu.Unlock()
	go s.runSession(sess)
}

// newClaimID is a fresh id for a claim of a session of streams, from the
// sequence of the connections' ids: an id names one session or claim.
func (s *Server) newClaimID() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastID++
	return s.lastID
}

// forgetSession forgets a session whose reader has finished (its place
// in the session limits is given back or handed to its held-back claim
// already: claims.Registry.Detach).
func (s *Server) forgetSession(sess *session) {
	s.mu.Lock()
	delete(s.sessions, sess.id())
	s.mu.Unlock()
	s.sessionsWG.Done()
}

// Reasons a connection is refused, as passed to Observer.Refused.
const (
	RefusedMaxSessions = sessionlimit.RefusedTotal
	RefusedPerAddr     = sessionlimit.RefusedPerAddr
)

// DefaultPerAddrIPv6Prefix: an IPv6 client counts by its /64.
const DefaultPerAddrIPv6Prefix = sessionlimit.DefaultIPv6Prefix

// Shutdown stops the server: it closes the listeners, stops all grants, sends
// ERROR 0x01 to every session and closes it. No waiter is promoted from the
// moment Shutdown starts. It waits for every session to end or ctx to be
// done; if ctx is done first while sessions remain, it closes their
// connections and returns ctx.Err(). Either way it then waits, at most
// stopRecordWait, for the stop to be recorded in the data directory.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	first := !s.shutdown
	s.shutdown = true
	for ln := range s.listeners {
		ln.Close()
	}
	sessions := s.sessionsLocked()
	s.mu.Unlock()
	// Before any session ends: a holder's end must not promote its waiters.
	s.claims.Close()

	if first {
		// Sessions that got their ERROR wait for their holders' close for
		// shutdownLinger, and at most three quarters of the drain: the
		// rest is for cutting those that did not close and recording the
		// clean stop, so that a partitioned holder does not make the stop
		// fail.
		now := time.Now()
		linger := shutdownLinger
		if deadline, ok := ctx.Deadline(); ok {
			linger = min(linger, deadline.Sub(now)*3/4)
		}
		s.drainUntil.Store(now.Add(linger).UnixNano())
		s.lines.flush() // the counts of suppressed lines, before the last words
		s.claims.FlushLog()
		// Each session gets its ERROR from its own goroutine, so a peer that
		// does not read stalls only itself (for at most writeTimeout).
		s.sessionsWG.Add(len(sessions))
		for _, sess := range sessions {
			go func() {
				defer s.sessionsWG.Done()
				sess.endAndHandOver(protocol.ErrShuttingDown, "")
			}()
		}
		go func() {
			s.sessionsWG.Wait()
			close(s.ended)
			// Every session has ended: the next run (leader) waits only
			// for the holders that may not know (claims.Registry.Detach).
			if err := s.claims.Drained(); err != nil {
				s.log.Error("cannot record the clean stop; the next start (leader) waits out this run's leases", "err", err)
			}
			s.tokens.Close()
			close(s.drained)
		}()
	}
	select {
	case <-s.drained:
		return nil
	case <-ctx.Done():
	}
	select {
	case <-s.ended:
		// Every session ended within the drain; only the record of the
		// stop (an fsync, slow on a busy disk) is still being written.
		// That is part of a clean stop, not a drain that overran.
		return s.awaitStopRecord()
	default:
	}
	s.mu.Lock()
	for _, sess := range s.sessions {
		sess.conn.Close()
	}
	s.mu.Unlock()
	// The readers end at once now; give them the moment it takes to
	// record the stop, so that a process that exits next leaves the
	// record of a clean stop (the cut holders' waits kept) rather than
	// that of a crash, which makes every lock wait.
	_ = s.awaitStopRecord()
	return ctx.Err()
}

// awaitStopRecord waits, at most stopRecordWait, for the sessions to end
// and the stop to be recorded.
func (s *Server) awaitStopRecord() error {
	select {
	case <-s.drained:
		return nil
	case <-time.After(stopRecordWait):
		return errors.New("the stop was not recorded in time")
	}
}

// shutdownLinger is how long a shutdown waits for a holder that got its
// ERROR 0x01 to close, which shows that it heard (else the next run keeps
// its lock's wait): longer than lingerTimeout, for clients slowed by a
// loaded machine, and short, since an HA leader leaves its cell, and the
// next one takes over, only after the drain.
const shutdownLinger = 3 * time.Second

// stopRecordWait bounds how long Shutdown, past its context, waits for
// the sessions it cut to end and the clean stop to be recorded.
const stopRecordWait = 2 * time.Second

// Kick ends the session with ERROR 0x02 (closed by administrator). If it held
// a lock, the next waiter is promoted before Kick returns. An id of a claim
// in a session of streams (protocol version 4) ends that claim alone, with
// STREAM_END 0x02, and its lock goes on once that is written. It reports
// whether the session or claim existed and was still live.
func (s *Server) Kick(sessionID uint64) bool {
	s.mu.Lock()
	sess := s.sessions[sessionID]
	s.mu.Unlock()
	if sess == nil {
		if !s.claims.Kick(sessionID) {
			return false
		}
	} else if !sess.endAndHandOver(protocol.ErrAdminClosed, "") {
		return false
	}
	s.log.Info("session kicked", "session", sessionID)
	return true
}

// Locks returns a snapshot of every live lock with its holder and waiters.
func (s *Server) Locks() []locktable.LockInfo { return s.claims.Locks() }

// LockListing returns every live lock, sorted by name, as the admin API
// lists it (claims.Registry.LockListing).
func (s *Server) LockListing() []listing.Lock { return s.claims.LockListing() }

// LockPage is one page of the listing (claims.Registry.LockPage).
func (s *Server) LockPage(after string, limit int) (page []listing.Lock, more bool) {
	return s.claims.LockPage(after, limit)
}

// SessionPage is one page of one kind of a lock's sessions
// (claims.Registry.SessionPage).
func (s *Server) SessionPage(name, kind string, after uint64, limit int) (listing.SessionPage, bool) {
	return s.claims.SessionPage(name, kind, after, limit)
}

// Counts returns the number of live locks, held locks and queued waiters.
func (s *Server) Counts() (locks, holders, waiters int) { return s.claims.Counts() }

// HeldBackUntil returns when the hold of session id's held-back holder
// ends, if session id is one.
func (s *Server) HeldBackUntil(id uint64) (time.Time, bool) { return s.claims.HeldBackUntil(id) }

// KickHeldBack ends the hold of session id's held-back holder now and
// hands its lock on, and reports whether there was one. Nobody can tell
// that holder (its connection is gone): it may still be working, and
// from now on only the fencing token protects the resource against it.
func (s *Server) KickHeldBack(id uint64) bool { return s.claims.KickHeldBack(id) }

// HeldBack returns the number of held-back holders: sessions that are
// gone but whose claims still hold their places, and count against the
// session limits.
func (s *Server) HeldBack() int { return s.claims.HeldBack() }

// Ready reports whether the server is accepting sessions and can grant: it
// serves at least one listener, is not shutting down, its token store can
// reserve tokens, its lease record can be written, and it is not waiting
// out a previous run's leases.
func (s *Server) Ready() bool {
	if s.tokens.Failure() != nil {
		return false // no grant can be made until the disk recovers
	}
	if rec := s.claims.Record(); rec != nil && rec.Failure() != nil {
		return false // nor can a claim whose lease needs a write be acknowledged
	}
	if s.RestartWait() > 0 {
		return false // nor until the previous run's leases have passed
	}
	if s.gate != nil {
		if ok, _ := s.gate.Active(time.Now()); !ok {
			return false // a passive server of an HA cell
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.shutdown && len(s.listeners) > 0
}

// RestartWait is how long a server that restarted on a used data
// directory still waits out its previous run's leases before its first
// grant; zero once it grants (or on a first start).
func (s *Server) RestartWait() time.Duration {
	if s.restartUntil.IsZero() {
		return 0
	}
	return max(time.Until(s.restartUntil), 0)
}

// Sessions returns the number of open sessions, including those that have not
// sent ACQUIRE yet.
func (s *Server) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// runSession runs a session's reader. A TLS connection does its handshake
// here first, so that a failure is counted and its log line rate-limited:
// anyone can send junk to the port, thousands of times a second. The
// handshake has the handshake timeout to itself; the ACQUIRE then gets it
// again (session.serve sets it).
func (s *Server) runSession(sess *session) {
	if tc, ok := sess.conn.(*tls.Conn); ok {
		_ = tc.SetDeadline(time.Now().Add(s.handshakeTimeout))
		if err := tc.Handshake(); err != nil {
			plaintextAcquire(err)
			if tlsHandshakeFailed(tc, err) {
				// A client without an acceptable certificate, or not
				// speaking TLS: worth an operator's attention, unlike an
				// ordinary close or a timeout.
				s.noise.TLSHandshakeFailed()
				s.lines.tls.Log("remote", tc.RemoteAddr(), "err", err)
			}
			sess.endAndHandOver(nil, "")
			sess.place.Leave()
			s.forgetSession(sess)
			return
		}
	}
	sess.run()
}

// NoiseObserver is an optional extension of Observer: an Observer that
// also has these methods is told of the failures an unauthenticated peer
// can cause at will, whose log lines are rate-limited.
type NoiseObserver interface {
	// AcceptFailed: accepting a connection failed (out of file
	// descriptors, ...); the server waits and retries.
	AcceptFailed()
	// TLSHandshakeFailed: a connection failed its TLS handshake (not a
	// plain close or a timeout).
	TLSHandshakeFailed()
}

type nopNoise struct{}

// HoldObserver is an optional extension of Observer: an Observer that also
// has HeldBack is told of every lock held back from the next waiter after
// its holder ended without a release (claims.HoldObserver).
type HoldObserver = claims.HoldObserver

// The causes of HoldObserver.HeldBack (see package claims).
const (
	HeldBackReset     = claims.HeldBackReset
	HeldBackLockDelay = claims.HeldBackLockDelay
)

type nopHolds struct{}

func (nopHolds) HeldBack(string) {}

func (nopNoise) AcceptFailed()       {}
func (nopNoise) TLSHandshakeFailed() {}

// noisyLines are the log lines a flood can cause, one rate limit each:
// the first few of every interval, then one summary with the count.
type noisyLines struct {
	accept, tls, maxSessions, perAddr *lograte.Line
}

func newNoisyLines(log *slog.Logger) noisyLines {
	line := func(level slog.Level, msg string) *lograte.Line { return lograte.Default(log, level, msg) }
	return noisyLines{
		accept:      line(slog.LevelWarn, "accept failed; retrying"),
		tls:         line(slog.LevelInfo, "TLS handshake failed"),
		maxSessions: line(slog.LevelWarn, "session limit reached; refusing connections"),
		perAddr:     line(slog.LevelWarn, "per-address session limit reached; refusing connections"),
	}
}

func (n noisyLines) flush() {
	for _, l := range []*lograte.Line{n.accept, n.tls, n.maxSessions, n.perAddr} {
		l.Flush()
	}
}

// Accept back-off: the wait after a failed accept doubles from
// minAcceptWait up to maxAcceptWait while failures go on, and starts over
// only after acceptQuiet without one. A successful accept does not reset
// it: out of file descriptors, every connection that closes lets one
// accept through and the next fails again, so a reset on success kept the
// wait at its minimum (1,869 failures in 14 s). Quiet means more than one
// maximum wait without a failure, so waiting alone never counts as quiet.
const (
	minAcceptWait = 5 * time.Millisecond
	maxAcceptWait = time.Second
	acceptQuiet   = 2 * maxAcceptWait
)

type acceptBackoff struct {
	wait time.Duration
	last time.Time // of the last failure
}

// next returns how long to wait after a failure at now.
func (b *acceptBackoff) next(now time.Time) time.Duration {
	if now.Sub(b.last) >= acceptQuiet {
		b.wait = 0
	}
	b.wait = min(max(2*b.wait, minAcceptWait), maxAcceptWait)
	b.last = now
	return b.wait
}

// plaintextAcquire answers a lock client that spoke plaintext to the TLS
// port with a plaintext ERROR 0x10 that says so, instead of a silent close
// that a waiting client would retry forever. 0x10 is the code for "this
// server does not speak what you sent": terminal, so the client reports it.
func plaintextAcquire(err error) {
	var rh tls.RecordHeaderError
	if !errors.As(err, &rh) || rh.Conn == nil || rh.RecordHeader[0] != protocol.MsgAcquire {
		return
	}
	_ = rh.Conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, _ = rh.Conn.Write(protocol.AppendError(nil, protocol.ErrUnsupportedVersion.Code,
		"this port speaks TLS: connect with TLS"))
}
