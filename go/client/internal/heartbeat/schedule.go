// Package heartbeat holds the client's heartbeat arithmetic: when to send the
// next heartbeat and how long a lease stays trustworthy without an ack. It is
// pure (no clock, no I/O) so it can be checked against spec/vectors/heartbeat.json.
package heartbeat

import (
	"time"

	"github.com/monolock/monolock/go/internal/spec"
)

// The factors of the schedule, from spec/constants.json ("heartbeat").
const (
	BaseIntervalFactor  = spec.HeartbeatBaseIntervalFactor  // baseInterval = lease * 0.25
	ClientTimeoutFactor = spec.HeartbeatClientTimeoutFactor // clientTimeout = lease * 0.8
	SRTTAlpha           = spec.HeartbeatSRTTAlpha           // weight of a new RTT sample in the smoothed RTT
	SafeRTTFactor       = spec.HeartbeatSafeRTTFactor       // safeRTT = srtt * 2
	MinInterval         = spec.HeartbeatMinIntervalMS * time.Millisecond
)

// The factors times one millisecond. Go evaluates constant expressions
// exactly, so lease/ms * these is lease * factor without rounding for a
// lease of whole milliseconds (and a factor that does not give whole
// nanoseconds per millisecond does not compile).
const (
	basePerMS    time.Duration = BaseIntervalFactor * 1e6
	timeoutPerMS time.Duration = ClientTimeoutFactor * 1e6
)

// Schedule computes the heartbeat interval of one connection from its lease
// and the round-trip times observed so far. The zero value is not usable; use
// New. A Schedule is not safe for concurrent use: one connection owns it.
type Schedule struct {
	base    time.Duration
	timeout time.Duration
	srtt    float64 // nanoseconds; a float so that the EWMA does not drift by rounding
	sampled bool
}

// New returns the schedule for a lease. The lease is assumed valid (whole
// milliseconds, 1 ms .. 2^32-1 ms), so the divisions below are exact.
func New(lease time.Duration) *Schedule {
	return &Schedule{
		base:    lease / time.Millisecond * basePerMS,
		timeout: lease / time.Millisecond * timeoutPerMS,
	}
}

// Observe feeds one RTT sample: the time from sending an ACQUIRE or HEARTBEAT
// to receiving its reply. The first sample initialises the smoothed RTT.
func (s *Schedule) Observe(rtt time.Duration) {
	if rtt < 0 {
		rtt = 0
	}
	if !s.sampled {
		s.srtt, s.sampled = float64(rtt), true
		return
	}
	s.srtt += SRTTAlpha * (float64(rtt) - s.srtt)
}

// SRTT returns the smoothed RTT (zero before the first sample).
func (s *Schedule) SRTT() time.Duration { return time.Duration(s.srtt + 0.5) }

// BaseInterval is lease/4, the interval on a link with no delay.
func (s *Schedule) BaseInterval() time.Duration { return s.base }

// ClientTimeout is 0.8 x lease: how long after the send of the last
// acknowledged message the client still trusts its session. It fires before
// the server's lease can run out, whatever the RTT.
func (s *Schedule) ClientTimeout() time.Duration { return s.timeout }

// Interval is the time from one heartbeat send to the next:
// clamp(base - 2*srtt, 1 ms, base). A slow link only shortens it, so that a
// heartbeat's reply still comes back well inside the lease.
func (s *Schedule) Interval() time.Duration {
	iv := float64(s.base) - SafeRTTFactor*s.srtt
	iv = min(max(iv, float64(MinInterval)), float64(s.base))
	return time.Duration(iv + 0.5)
}
