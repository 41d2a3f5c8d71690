// Package client is the canonical Go client of monolock, a lock service whose
// every grant carries a fencing token.
//
// The module is not published yet, so go get cannot fetch it on its own:
// point your module at a clone of https://github.com/monolock/monolock.
//
//	go mod edit -replace github.com/monolock/monolock/go=/path/to/clone/go
//	go get github.com/monolock/monolock/go/client
//
// One Lock is one TCP (or TLS) connection to the server: the connection is
// the lease, and releasing a lock closes it. While a lock is held the client
// sends heartbeats on the schedule of the protocol and tracks how long the
// server is guaranteed to keep the lock (Lock.ValidUntil). When that time
// passes without an acknowledgement, or the server reports an error, or the
// connection fails, the lock is lost: Lock.Done closes and Lock.Err says why.
// The loss is told first. A lock lost by timeout keeps its connection open
// (without heartbeats) until Release or until a full lease after the last
// acknowledged send, because the server takes a close as a release and would
// otherwise grant the lock to the next waiter before the holder knew. So
// the holder has at least 0.2 x lease between Done and anyone else's grant.
// A lost lock is never re-acquired behind the caller's back; acquire again
// and you get a new, larger token.
//
//	c, err := client.New(client.WithServers("locks.internal:7117"), client.WithLease(5*time.Second))
//	if err != nil { ... }
//	lock, err := c.Acquire(ctx, "jobs/nightly-report")
//	if err != nil { ... }
//	defer lock.Release()
//	lctx, cancel := lock.Context(ctx) // cancelled if the lock is lost
//	defer cancel()
//	work(lctx, lock.Token()) // pass the token on to the guarded resource
//
// Waiting: Acquire queues on the server and blocks until the lock is granted
// or ctx is done. While it waits it re-queues after temporary server errors
// and connection failures, with exponential backoff and jitter, for as long
// as ctx allows. With several servers, every failed attempt moves on to the
// next one in the list (spec/constants.json, retry.server_order "rotate").
// TryAcquire returns ErrBusy at once instead of queueing.
//
// Sessions: Client.Session opens one connection that carries many claims
// (protocol version 4), with one lease and one heartbeat for all of them.
// Session.Acquire returns the same *Lock, with the same meaning; the
// session's claims share its fate (one lost connection loses them all).
// Pool spreads claims over a few sessions.
//
// Servers: an address is HOST:PORT, [IPV6]:PORT, or a bare host (HOST,
// [IPV6] or an IPv6 address) for port 7117; New refuses anything else.
//
// Errors: every message starts with "monolock: " once. Names and leases that
// the server would refuse are refused before any byte is sent, with an error
// that matches the canonical *protocol.Error of the code the server would
// have used (errors.Is and errors.As) and says what was wrong: a lease that
// is not a whole number of milliseconds from 1 ms to 4294967295 ms, a name's
// length and the limit. An ERROR from the server arrives as *ServerError,
// which matches the canonical error of its code with errors.Is. An ERROR ends
// the session at its type byte: the client never waits for its reason, and
// when the code byte did not come in the same read the error is
// ErrServerEnded, which has no code.
package client
