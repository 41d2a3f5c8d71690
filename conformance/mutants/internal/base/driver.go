// Package base is a minimal, correct monolock client written on raw sockets
// and wrapped in the conformance pipe protocol. Each mutant flips exactly one
// Bugs knob; the base with no knob set must pass every scenario, which proves
// the scenarios are passable, and each knob must fail at least one, which
// proves they can fail.
package base

import (
	"crypto/tls"
	"os"

	"github.com/monolock/monolock/go/client"
	"github.com/monolock/monolock/go/testkit/pipe"
)

// Bugs are the deliberate mistakes a mutant can make.
type Bugs struct {
	// PromotionIsAck takes a promotion that arrives while a heartbeat is in
	// flight as that heartbeat's ack.
	PromotionIsAck bool
	// OneReadOneMessage assumes every read returns exactly one whole frame.
	OneReadOneMessage bool
	// FixedHalfLease heartbeats every lease/2, ignoring base interval and RTT.
	FixedHalfLease bool
	// TimeoutFromReply measures the client timeout from the last reply
	// instead of the send of the last acknowledged request.
	TimeoutFromReply bool
	// SkipNameValidation sends names without checking them first.
	SkipNameValidation bool
	// ReleaseWithoutWait reports released as soon as it has closed,
	// before the server has let the lock go.
	ReleaseWithoutWait bool
	// CloseBeforeTell closes the connection at the deadline and only then
	// reports the loss, so a live server hands the lock on first.
	CloseBeforeTell bool
	// WaitWholeError reads an ERROR to the end of its reason before it
	// tells anything, so a cut reason leaves it waiting for its deadline.
	WaitWholeError bool
	// SharedFrameForExclusive sends every claim as a version 2 ACQUIRE,
	// exclusive ones too, which a version 1 server refuses.
	SharedFrameForExclusive bool
	// RetryUnsupportedShared takes ERROR 0x10 in reply to a shared claim
	// as a reason to queue again, instead of the terminal error it is.
	RetryUnsupportedShared bool
	// RetryCertificateProblems takes a refused certificate for a failed
	// connection and tries the server again until the deadline.
	RetryCertificateProblems bool
	// SemaphoreLimitPlusOne sends a semaphore claim's limit one higher
	// than the application asked for: the server lets one holder more in
	// than the holders count on.
	SemaphoreLimitPlusOne bool
	// StaleLeaderAfterSilence keeps showing the last leader an observer
	// saw after its watch stopped being vouched for (a silent server, a
	// lost connection), instead of unknown.
	StaleLeaderAfterSilence bool
	// HeldBackAsNone shows a leader held back (its connection gone, its
	// hold not over) as no leader: a follower would elect or route around
	// a leader that may still act.
	HeldBackAsNone bool

	// Sessions (protocol version 4).

	// SessionTimeoutFromReply measures the session's deadline from the
	// last SESSION_OK or ALIVE instead of the send of the request it
	// answered.
	SessionTimeoutFromReply bool
	// SessionReleaseWithoutAck reports a claim on a session released as
	// soon as its RELEASE is sent, before RELEASED says the server has
	// let the lock go.
	SessionReleaseWithoutAck bool
	// StreamEndEndsSession takes a STREAM_END (one claim refused or
	// kicked) for the end of the whole session: every claim is lost.
	StreamEndEndsSession bool
	// SessionCloseBeforeTell closes the session's connection at its
	// deadline and only then reports its claims lost, so a live server
	// hands them on before their holders know.
	SessionCloseBeforeTell bool
	// SessionCloseResets closes a session with a reset instead of a FIN:
	// the server holds its claims back for a lease instead of releasing
	// them at once.
	SessionCloseResets bool
	// ReuseStreamID gives a new stream the lowest id not in use, so an id
	// released before is opened again.
	ReuseStreamID bool
	// TryBusyKeepsWaiting lets a try claim on a session whose OPEN is
	// answered WAITING wait like a wait claim, instead of releasing its
	// stream and reporting busy.
	TryBusyKeepsWaiting bool
}

// tlsConfig builds the TLS configuration; an empty server name is filled in
// per address by the dialer.
func tlsConfig(t *pipe.TLS) (*tls.Config, error) {
	f := client.TLSFiles{CA: t.CAFile, Cert: t.CertFile, Key: t.KeyFile}
	if t.ServerName != nil {
		f.ServerName = *t.ServerName
	}
	return client.TLSFromFiles(f)
}

// Main runs the driver on stdin/stdout until quit or EOF.
func Main(client string, bugs Bugs) {
	o := pipe.NewWriter(os.Stdout)
	o.Ready(client, "cancel", "election", "invalid_utf8_names", "sessions", "shared", "tls")
	claims := map[string]*claim{}
	observers := map[string]*observer{}
	sessions := map[string]*session{}
	onSession := map[string]*session{} // claims on a session, by id
	closed := map[*session]bool{}
	pipe.ReadCommands(os.Stdin, o, func(c pipe.Command) {
		switch c.Cmd {
		case pipe.Acquire:
			cl, err := newClaim(c, bugs, o)
			if err != nil {
				o.DriverError(err.Error())
				return
			}
			if c.Session != "" {
				s := sessions[c.Session]
				if s == nil {
					o.DriverError("acquire " + c.ID + ": no session " + c.Session)
					return
				}
				cl.leaseMS = s.leaseMS // the session's lease is every claim's
				delete(claims, c.ID)
				onSession[c.ID] = s
				if closed[s] {
					cl.fail(pipe.Error, "connect", -1)
					return
				}
				s.cmds <- sessionCmd{kind: "acquire", cl: cl}
				return
			}
			delete(onSession, c.ID)
			claims[c.ID] = cl
			go cl.run()
		case pipe.Session:
			if sessions[c.ID] != nil {
				o.DriverError("session " + c.ID + " is already open")
				return
			}
			s, err := newSession(c, bugs, o)
			if err != nil {
				o.DriverError(err.Error())
				return
			}
			sessions[c.ID] = s
			go s.run()
		case pipe.Observe:
			ob, err := newObserver(c, bugs, o)
			if err != nil {
				o.DriverError(err.Error())
				return
			}
			observers[c.ID] = ob
			go ob.run()
		case pipe.Proclaim:
			cl := claims[c.ID]
			if cl == nil || c.Value == nil {
				o.DriverError("proclaim needs a claim's id and a value")
				return
			}
			cl.proclaims <- *c.Value
		case pipe.Release, pipe.Cancel:
			if s := sessions[c.ID]; s != nil && c.Cmd == pipe.Release {
				if !closed[s] {
					closed[s] = true
					s.close()
				}
				o.Emit(pipe.Event{Name: pipe.Released, ID: c.ID})
				return
			}
			if s := onSession[c.ID]; s != nil {
				if closed[s] {
					if c.Cmd == pipe.Release {
						o.Emit(pipe.Event{Name: pipe.Released, ID: c.ID})
					}
					return
				}
				s.cmds <- sessionCmd{kind: c.Cmd, id: c.ID}
				return
			}
			if ob := observers[c.ID]; ob != nil {
				ob.stop()
				if c.Cmd == pipe.Release {
					ob.emit(pipe.Event{Name: pipe.Released})
				}
				return
			}
			cl := claims[c.ID]
			if cl == nil {
				o.DriverError("unknown id " + c.ID)
				return
			}
			cl.stop(c.Cmd)
		default:
			o.DriverError("unknown command " + c.Cmd)
		}
	})
	closeAll(claims)
	for _, s := range sessions {
		if !closed[s] {
			s.close()
		}
	}
	for _, ob := range observers {
		ob.stop()
	}
}

func closeAll(claims map[string]*claim) {
	for _, cl := range claims {
		cl.stop("quit")
	}
}
