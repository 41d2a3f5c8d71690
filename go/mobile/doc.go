// Package monolock is the monolock client for Android, iOS and any JVM
// program, exported with gomobile bind from the canonical Go client
// (github.com/monolock/monolock/go/client). It adds no protocol logic of its
// own: it adapts that client's API to what gomobile can export (strings,
// ints, []byte, bool, errors, structs by pointer, interfaces for callbacks).
//
// The Go package name is monolock (not mobile) because gomobile names the
// generated API after it: monolock.Monolock, monolock.Client in Java and
// Kotlin; MonolockClient, MonolockNewClient in Swift.
//
// Usage, in Go terms (see docs/mobile.md for Kotlin and Swift):
//
//	cfg := NewConfig()
//	cfg.Servers = "locks.internal:7117"
//	c, err := NewClient(cfg)
//	lock, err := c.Acquire("jobs/nightly-report", 30000, nil) // wait up to 30 s
//	lock.SetLostListener(app)                                  // app.OnLost(code, reason)
//	use(lock.Token())
//	lock.Unlock()
//
// Errors carry a kind and, when there is one, the protocol's wire code; read
// them with ErrorKind, ErrorCode and ErrorTemporary, which also work on the
// Java exception or NSError the binding turns the error into.
//
// Threads: Acquire and TryAcquire block the calling thread (never call them
// on a UI thread). Listeners are called on threads the Go runtime owns, never
// on the caller's thread: hop to the UI thread yourself.
package monolock
