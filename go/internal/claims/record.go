package claims

import (
	"time"

	"github.com/monolock/monolock/go/internal/sessionlimit"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// recordLease records c's lease (in the data directory, or in the cell's
// etcd) before c is acknowledged: a server that starts after a crash of
// this one, or a new leader of the cell, holds the name back that long. A
// failure refuses the claim with ERROR 0x01, which the client retries.
func (r *Registry) recordLease(c *Claim, lease time.Duration) error {
	rec, where := r.record, "in the data directory"
	if r.gate != nil {
		if err := r.MayAcknowledge(); err != nil {
			return err
		}
		if rec, where = r.gate.Leases(), "in the cell"; rec == nil {
			return notActive("")
		}
	}
	if rec != nil {
		if err := rec.Admit(c.entry.Name, r.recordedLease(lease)); err != nil {
			r.lines.leaseRecord.Log("err", err, "lease", lease, "where", where)
			return &WireError{protocol.ErrShuttingDown, "cannot record the lease " + where}
		}
		c.record = rec
	}
	// From here on Detach tells the record. (Without one: tokens of the
	// table alone, in tests.)
	c.leaseMS.Store(uint32(lease.Milliseconds()))
	return nil
}

// recordedLease is how long the lease record makes a restart after a crash
// hold back a lock that a claim with lease holds or waits for: the lease,
// and the lock delay that a silent holder's expiry adds to it. Both are on
// record before the claim is acknowledged, so long before the expiry the
// delay extends: a crash at any moment of the delay leaves it to wait out.
// (A Hold written at the expiry would be lazy: a crash within a second of
// it lost the delay.)
func (r *Registry) recordedLease(lease time.Duration) time.Duration {
	return lease + r.lockDelay
}

// Detach tells the layer that c's connection has ended (after c itself
// ended: Release, Expire or Reset) and hands over the connection's place
// in the session limits: a held-back c takes it over until its hold
// ends; any other claim gives it back now.
//
// It also tells the lease record. A claim that ended while the server ran
// leaves nothing a running server would not give away too: its holder
// closed, its lease ran out, it was kicked or broke the protocol (its
// lock went on at once), or it reset (then its hold is on record). A
// holder that the shutdown told (ERROR 0x01) or cut, and that neither
// closed (heard) nor outlived its lease (until), may not have heard (a
// partitioned holder cannot): its lock keeps its wait in the record until
// the lease would have run out, also after the clean stop.
func (r *Registry) Detach(c *Claim, place sessionlimit.Place, heard bool, until time.Time) {
	r.mu.Lock()
	heldBack := c.hold != nil
	if heldBack {
		c.hold.place, place = place, sessionlimit.Place{}
	}
	closing := r.closing
	r.mu.Unlock()
	place.Leave()

	ms := c.leaseMS.Load()
	if c.record == nil || ms == 0 {
		return
	}
	// A held-back claim's hold is on record already (endHoldingBack): a
	// second record of it would hold a second permit in the next run.
	if !heldBack && c.Token() != 0 && !heard && time.Now().Before(until) && closing {
		holdOnRecord(c.record, &c.entry, until)
	}
	c.record.Done(c.entry.Name, r.recordedLease(time.Duration(ms)*time.Millisecond))
}

// Drained records that every claim of this run has ended at a clean stop:
// the next run (leader) waits only for the holders that may not know.
func (r *Registry) Drained() error {
	if rec := r.Record(); rec != nil {
		return rec.Drained()
	}
	return nil
}
