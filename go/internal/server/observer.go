package server

import "time"

// Observer is told what the server does, for metrics. Its methods are called
// on the server's hot paths, outside its locks, and must be fast and never
// block; none is called per heartbeat.
type Observer interface {
	// Granted: a lock was granted to a claim that found it free.
	Granted()
	// Promoted: a waiter was granted a lock after the holder left;
	// handoff is the time from the holder's end (or, with a lock delay,
	// its expiry) to the promotion being sent.
	Promoted(handoff time.Duration)
	// Expired: a session's lease ran out after its ACQUIRE.
	Expired()
	// ErrorSent: a session was sent ERROR code (called once it is written).
	ErrorSent(code uint8)
	// Refused: a connection was closed over a limit (RefusedMaxSessions or
	// RefusedPerAddr).
	Refused(reason string)
	// HeartbeatBurst: a session sent extra heartbeats that arrived with
	// another one in a single read, and got one reply for all of them.
	HeartbeatBurst(extra int)
	// TokenReservationFailed: a block of fencing tokens could not be made
	// durable (at most once per retry interval while the disk fails).
	TokenReservationFailed()
}

type nopObserver struct{}

func (nopObserver) Granted()                {}
func (nopObserver) Promoted(time.Duration)  {}
func (nopObserver) Expired()                {}
func (nopObserver) ErrorSent(uint8)         {}
func (nopObserver) Refused(string)          {}
func (nopObserver) TokenReservationFailed() {}
func (nopObserver) HeartbeatBurst(int)      {}
