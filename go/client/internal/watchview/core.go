package watchview

import (
	"errors"
	"fmt"
	"time"

	"github.com/monolock/monolock/go/client/internal/heartbeat"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// Core is a watch's picture and how long it is vouched for: the events
// build the picture, and each WATCHING acknowledges the one request in
// flight (the WATCH, then each HEARTBEAT), which vouches for the picture
// until that request's send plus the client timeout (0.8 x lease), as a
// lock's acknowledgements do. spec/vectors/watch.json pins it.
type Core struct {
	View
	timeout    time.Duration
	lastSend   time.Time
	inFlight   bool
	validUntil time.Time // zero: vouched for by nothing
}

// ErrUnasked is a WATCHING that answers no request, or vouches for
// another point of the history than the picture's.
var ErrUnasked = errors.New("watch: a WATCHING that does not answer the request in flight")

// NewCore returns the core of a watch with lease.
func NewCore(lease time.Duration) *Core {
	return &Core{timeout: heartbeat.New(lease).ClientTimeout()}
}

// Sent records a request (WATCH or HEARTBEAT) sent at now.
func (c *Core) Sent(now time.Time) { c.lastSend, c.inFlight = now, true }

// InFlight reports whether a request awaits its WATCHING, and when the
// last request was sent.
func (c *Core) InFlight() (inFlight bool, lastSend time.Time) { return c.inFlight, c.lastSend }

// Event applies an EVENT that arrived at now. An error (ErrGap) leaves
// the picture vouched for by nothing: the connection must end.
func (c *Core) Event(e protocol.Event, now time.Time) error {
	if err := c.Apply(e, now); err != nil {
		c.validUntil = time.Time{}
		return err
	}
	return nil
}

// Watching takes the WATCHING that answers the request in flight: the
// picture is whole up to (epoch, seq), and vouched for until the
// request's send plus the client timeout.
func (c *Core) Watching(epoch, seq uint64) error {
	if !c.inFlight || !c.Started() || epoch != c.Epoch || seq != c.Seq {
		c.validUntil = time.Time{}
		return fmt.Errorf("%w: epoch %d seq %d for the picture at %d/%d", ErrUnasked, epoch, seq, c.Epoch, c.Seq)
	}
	c.inFlight = false
	c.validUntil = c.lastSend.Add(c.timeout)
	return nil
}

// Disconnected ends the connection: nothing in flight, nothing vouched
// for; the picture stays, for a resume from its (epoch, seq).
func (c *Core) Disconnected() {
	c.inFlight, c.validUntil = false, time.Time{}
	c.Resume()
}

// Known reports whether the picture is vouched for at now.
func (c *Core) Known(now time.Time) bool { return c.Started() && now.Before(c.validUntil) }

// ValidUntil is when the picture stops being vouched for (zero: it is
// not).
func (c *Core) ValidUntil() time.Time { return c.validUntil }
