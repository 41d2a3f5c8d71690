package claims

import (
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/monolock/monolock/go/internal/leaserecord"
	"github.com/monolock/monolock/go/internal/locktable"
	"github.com/monolock/monolock/go/internal/lograte"
	"github.com/monolock/monolock/go/internal/peer"
	"github.com/monolock/monolock/go/internal/watch"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// Authorizer decides whether the peer on conn may claim the lock name. It
// runs after the name passed validation; an error refuses the claim with
// ERROR 0x18. conn is the accepted connection (a *tls.Conn once TLS is
// configured), so an implementation can look at the peer's identity.
type Authorizer interface {
	Authorize(conn net.Conn, name string) error
}

// Gate decides, in an HA cell, whether this server is the active one.
type Gate interface {
	// Active reports whether this server may acknowledge claims at now;
	// if not, active is the address of the server that may ("" if unknown).
	Active(now time.Time) (ok bool, active string)
	// Leases is the cell's lease record while this server leads (nil
	// otherwise): a claim is acknowledged only once the record took its
	// lease, so that a server that takes over holds its lock back that long.
	Leases() *leaserecord.Record
}

// Observer is told of the claim layer's events, for metrics; see
// server.Observer, which includes it.
type Observer interface {
	Granted()
	Promoted(handoff time.Duration)
	Expired()
	TokenReservationFailed()
}

// HoldObserver is told of every lock held back from the next waiter after
// its holder ended without a release; cause is HeldBackReset or
// HeldBackLockDelay.
type HoldObserver interface {
	HeldBack(cause string)
}

// Config is the claim layer's policy and the state it works with.
type Config struct {
	Table *locktable.Table
	// Record is the data directory's lease record (a single server); nil
	// with a Gate, whose leader's record is the cell's, or in tests of
	// the table alone.
	Record     *leaserecord.Record
	Gate       Gate // nil: always active
	Authorizer Authorizer
	MaxLease   time.Duration // 0: none
	LockDelay  time.Duration
	Observer   Observer
	Holds      HoldObserver
	Log        *slog.Logger
}

// Registry is the claim layer: every claim admitted and not yet forgotten,
// live or held back.
type Registry struct {
	table      *locktable.Table
	record     *leaserecord.Record
	gate       Gate
	authorizer Authorizer
	maxLease   time.Duration
	lockDelay  time.Duration
	obs        Observer
	holds      HoldObserver
	log        *slog.Logger
	lines      lines

	// mu orders a claim's entry into the table against its end, and
	// guards the maps; it is taken before the table's own mutex.
	mu       sync.Mutex
	claims   map[uint64]*Claim // in the table: live, or held back
	heldBack int               // how many of claims are held back
	closing  bool              // the server is shutting down
	// blockEnds is when the block on each blocked name ends (HoldName).
	blockEnds map[string]time.Time

	watches *watch.Hub // the watched names: their changes are events
}

// New returns the claim layer over cfg.Table.
func New(cfg Config) *Registry {
	return &Registry{
		table: cfg.Table, record: cfg.Record, gate: cfg.Gate, authorizer: cfg.Authorizer,
		maxLease: cfg.MaxLease, lockDelay: cfg.LockDelay, obs: cfg.Observer, holds: cfg.Holds,
		log: cfg.Log, lines: newLines(cfg.Log),
		claims:    make(map[uint64]*Claim),
		blockEnds: make(map[string]time.Time),
		watches:   watch.New(),
	}
}

// lines are the claim layer's log lines that a client can cause at will,
// rate-limited.
type lines struct {
	leaseRecord, heldBack, aclRefused *lograte.Line
}

func newLines(log *slog.Logger) lines {
	line := func(level slog.Level, msg string) *lograte.Line { return lograte.Default(log, level, msg) }
	return lines{
		leaseRecord: line(slog.LevelError, "cannot record a longer lease; refusing sessions with it"),
		// A client that acquires and resets, again and again, makes one
		// of these per connection.
		heldBack: line(slog.LevelInfo, "holder gone without a release; lock held back"),
		// An operator's first question when a client is refused; a
		// client can be refused again and again.
		aclRefused: line(slog.LevelWarn, "claim refused by the ACL"),
	}
}

// FlushLog logs the counts of the suppressed lines.
func (r *Registry) FlushLog() {
	for _, l := range []*lograte.Line{r.lines.leaseRecord, r.lines.heldBack, r.lines.aclRefused} {
		l.Flush()
	}
}

// Active reports whether this server may acknowledge claims now, and
// when not, the active server's address if known. It reads the clock
// itself, so a server that was paused checks on resume.
func (r *Registry) Active() (ok bool, leader string) {
	if r.gate == nil {
		return true, ""
	}
	return r.gate.Active(time.Now())
}

// MayAcknowledge returns nil when this server may acknowledge a claim
// now, else the ERROR 0x01 that sends the client to the active server of
// its cell. Every reply asks it first: a server never acknowledges for a
// cell it no longer leads.
func (r *Registry) MayAcknowledge() error {
	if ok, leader := r.Active(); !ok {
		return notActive(leader)
	}
	return nil
}

// Record is the lease record new claims are admitted into: the data
// directory's, or the cell's while this server leads; nil if none.
func (r *Registry) Record() *leaserecord.Record {
	if r.gate != nil {
		return r.gate.Leases()
	}
	return r.record
}

// AdmitsAtOnce reports whether Admit of a claim with lease returns
// without waiting for a write (the lease record's, a token block's). It
// is a hint: a write may start right after it answered.
func (r *Registry) AdmitsAtOnce(lease time.Duration) bool {
	rec := r.Record()
	return (rec == nil || rec.AdmitsAtOnce(r.recordedLease(lease))) && r.table.TokensInHand()
}

// Admit decides c's request, records its lease and puts it into the lock
// table: after it returns nil, c holds the lock (Token is set) or waits
// for it, and may be acknowledged. An error refuses it: a *WireError
// with the code to send, or ErrEnded when c ended meanwhile (a kick
// during the handshake).
func (r *Registry) Admit(c *Claim, req Request) error {
	if refused := admission(req, r.admissionInputs(req)); refused != nil {
		if refused.Code == protocol.ErrNotAuthorized {
			r.logACLRefusal(req)
		}
		return refused
	}
	c.entry.Name, c.entry.Shared, c.entry.Limit = req.Name, req.Shared, req.Limit
	if len(req.Value) > 0 {
		c.value.Store(&req.Value)
	}
	// Only a claim that will be acknowledged enters the lease record: one
	// refused above (a lease over --max-lease, the ACL, a limit the
	// name's shared claims do not share) is nothing a restart has to
	// wait out.
	if err := r.recordLease(c, req.Lease); err != nil {
		return err
	}
	return r.enter(c)
}

// admissionInputs finds what the admission of req reads besides req: the
// server's policy now, the ACL's verdict for this client, and the limit
// the name's shared claims agreed on.
func (r *Registry) admissionInputs(req Request) admissionInputs {
	in := admissionInputs{maxLease: r.maxLease}
	in.active, in.leader = r.Active()
	if r.authorizer != nil {
		in.acl = r.authorizer.Authorize(req.Conn, req.Name)
	}
	if req.Shared {
		in.limit, in.bound = r.table.Limit(req.Name)
	}
	return in
}

// Proclaim replaces c's value (PROCLAIM), while it waits or holds: its
// token and its place stay as they are. The name's watchers are told.
func (r *Registry) Proclaim(c *Claim, value []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(value) == 0 {
		c.value.Store(nil)
	} else {
		c.value.Store(&value)
	}
	if r.claims[c.ID()] == c && c.hold == nil {
		r.emitValue(c)
	}
}

// enter puts c into the lock table unless it ended meanwhile.
func (r *Registry) enter(c *Claim) error {
	r.mu.Lock()
	if c.ended {
		r.mu.Unlock()
		return ErrEnded
	}
	granted, err := r.table.Acquire(&c.entry)
	if err == nil {
		r.claims[c.ID()] = c
		r.emitEntered(c, granted)
	}
	r.mu.Unlock()
	switch {
	case err == nil:
		if granted {
			r.obs.Granted()
		}
		return nil
	case errors.Is(err, locktable.ErrClosed):
		return protocol.ErrShuttingDown
	case errors.Is(err, locktable.ErrLimitMismatch):
		// A claim with another limit came first, after the admission.
		theirs, _ := r.table.Limit(c.entry.Name)
		return limitMismatchError(c.entry.Limit, theirs)
	}
	r.log.Error("cannot issue a fencing token", "err", err)
	return &WireError{protocol.ErrShuttingDown, "cannot issue a fencing token"}
}

// Release ends c: it leaves the table, and whoever fits after it is
// granted the lock at once (unless the server is shutting down). why
// (protocol.End*) is how its holding ended, for watchers. A claim that
// never entered the table will not enter it after this.
func (r *Registry) Release(c *Claim, why uint8) {
	start := time.Now()
	r.mu.Lock()
	c.ended = true
	if r.claims[c.ID()] == c {
		r.emitEnd(c, c.Token() != 0, why)
	}
	promoted, failed := r.table.Release(&c.entry)
	delete(r.claims, c.ID())
	granted, refused := r.claimsOfLocked(promoted, failed)
	r.mu.Unlock()
	r.handOver(granted, refused, start)
}

// Expire ends c, whose lease ran out with no word from its client: a
// holder is held back for the lock delay, as it may still be touching the
// resource. It reports whether c held the lock.
func (r *Registry) Expire(c *Claim) bool {
	r.obs.Expired()
	return r.endHoldingBack(c, r.lockDelay, HeldBackLockDelay)
}

// Reset ends c, whose connection was reset: a reset is no release (a
// middlebox or a rebooted host may have sent it, and the holder may not
// know yet), so a holder is held back until its lease would have run out
// after its last valid message, until, and at least for the lock delay.
func (r *Registry) Reset(c *Claim, until time.Time) {
	r.endHoldingBack(c, max(time.Until(until), r.lockDelay), HeldBackReset)
}

// claimsOfLocked finds the claims of the table's entries, and tells the
// watchers of the grants. Caller holds r.mu.
func (r *Registry) claimsOfLocked(promoted, failed []*locktable.Claim) (granted, refused []*Claim) {
	for _, p := range promoted {
		if c := r.claims[p.Session]; c != nil {
			granted = append(granted, c)
		}
	}
	r.emitGrants(granted)
	for _, f := range failed {
		if c := r.claims[f.Session]; c != nil {
			refused = append(refused, c)
		}
	}
	return granted, refused
}

// handOver tells the claims the table promoted (or could not give a
// token to) after a claim ended at start.
func (r *Registry) handOver(granted, refused []*Claim, start time.Time) {
	for _, c := range refused {
		c.sink.End(protocol.ErrShuttingDown, "cannot issue a fencing token")
	}
	for _, c := range granted {
		if r.MayAcknowledge() != nil {
			return // stepping down ends these claims
		}
		r.log.Debug("promoted", "claim", c.ID(), "lock", c.entry.Name, "token", c.Token())
		if c.sink.Granted(c.Token()) {
			r.obs.Promoted(time.Since(start))
		}
	}
}

// Regrant hands out the locks whose waiters could not get a token while
// the token source had none; the source calls it once tokens are back.
func (r *Registry) Regrant() {
	start := time.Now()
	r.mu.Lock()
	promoted, failed := r.table.Regrant()
	granted, refused := r.claimsOfLocked(promoted, failed)
	r.mu.Unlock()
	r.handOver(granted, refused, start)
	if len(granted) > 0 {
		r.log.Info("fencing tokens available again; waiting claims granted", "claims", len(granted))
	}
}

// TokenFailure reports a failed token reservation. The store retries once
// per interval, so this logs at most that often; waiters stay queued.
func (r *Registry) TokenFailure(err error) {
	r.obs.TokenReservationFailed()
	r.log.Error("cannot reserve fencing tokens; grants wait until the data directory is writable again", "err", err)
}

// Close stops every grant, for the server's shutdown: no claim enters the
// table and no waiter is promoted from now on.
func (r *Registry) Close() {
	r.mu.Lock()
	r.closing = true
	r.mu.Unlock()
	r.table.Close()
}

// logACLRefusal logs a claim the ACL refused, with every identity of its
// client (rate-limited: a client can be refused again and again).
func (r *Registry) logACLRefusal(req Request) {
	r.lines.aclRefused.Log("lock", req.Name, "identities", strings.Join(peer.Identities(req.Conn), " "),
		"remote", req.Conn.RemoteAddr().String())
}

// Kick ends the live claim id with ERROR 0x02 through its sink (a claim
// of a session: its stream ends, the session lives on), and reports
// whether there was one to end. A held-back claim is ended by
// KickHeldBack instead.
func (r *Registry) Kick(id uint64) bool {
	r.mu.Lock()
	c := r.claims[id]
	live := c != nil && c.hold == nil
	r.mu.Unlock()
	return live && c.sink.End(protocol.ErrAdminClosed, "")
}
