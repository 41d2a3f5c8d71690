package monolock

import (
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/monolock/monolock/go/client"
)

// LostListener is implemented by the app to hear that a lock was lost:
// the server ended the session (code is its wire code), no acknowledgement
// came in time, or the connection broke (code is NoCode for both). reason
// is a message for humans. It is never called for a lock the app unlocked.
// It runs on a thread of the Go runtime, not the app's main thread, as soon
// as the loss is decided: a lock lost by timeout keeps its connection open
// until Unlock or a full lease after the last acknowledgement, so the app
// hears of the loss before the server can grant the lock to anyone else.
type LostListener interface {
	OnLost(code int, reason string)
}

// Lock is a held lock, until Unlock or until it is lost. Always Unlock a
// lock you are done with, also after loss: a lock that is merely dropped
// stays held as long as the process lives.
//
// Only Acquire and TryAcquire make real locks. The binding also offers a
// no-argument constructor (new Lock() in Java, MonolockLock() in Swift); such
// a Lock holds nothing and behaves like an unlocked one.
type Lock struct {
	inner *client.Lock

	mu       sync.Mutex
	listener LostListener
	notified bool // the current listener has been called (or is being called)
}

func newLock(inner *client.Lock) *Lock {
	l := &Lock{inner: inner}
	go func() {
		<-inner.Done()
		l.notify()
	}()
	return l
}

// Name returns the lock's name.
func (l *Lock) Name() string {
	if l.inner == nil {
		return ""
	}
	return l.inner.Name()
}

// Token returns the fencing token of the grant: pass it to the resource the
// lock protects, which refuses requests with a token smaller than one it
// has seen. Tokens are unsigned 64-bit numbers: above 2^63-1 this returns a
// negative value (Java: Long.toUnsignedString); TokenString is exact.
func (l *Lock) Token() int64 { return int64(l.token()) }

// TokenString returns the fencing token in decimal.
func (l *Lock) TokenString() string { return strconv.FormatUint(l.token(), 10) }

func (l *Lock) token() uint64 {
	if l.inner == nil {
		return 0
	}
	return l.inner.Token()
}

// ValidUntilMillis returns until when (Unix time in milliseconds, comparable
// with System.currentTimeMillis) the server is sure to keep the lock.
// Heartbeats move it forward; once it passes, the lock is lost.
func (l *Lock) ValidUntilMillis() int64 {
	if l.inner == nil {
		return 0
	}
	return l.inner.ValidUntil().UnixMilli()
}

// ValidForMillis returns how many milliseconds of validity are left, 0 when
// none. It reads the monotonic clock, so clock changes do not affect it.
func (l *Lock) ValidForMillis() int64 {
	if l.inner == nil {
		return 0
	}
	return max(0, time.Until(l.inner.ValidUntil()).Milliseconds())
}

// err is the Go client's Lock.Err: nil while held, ErrReleased after Unlock,
// an error wrapping ErrLockLost after loss.
func (l *Lock) err() error {
	if l.inner == nil {
		return client.ErrReleased
	}
	return l.inner.Err()
}

// IsHeld reports whether the lock is still held: not lost, not unlocked.
func (l *Lock) IsHeld() bool { return l.err() == nil }

// IsLost reports whether the lock was lost (rather than unlocked).
func (l *Lock) IsLost() bool { return errors.Is(l.err(), client.ErrLockLost) }

// LostKind returns why the lock was lost (KindServer, KindTimeout or
// KindIO), or "" while it is held or after Unlock.
func (l *Lock) LostKind() string {
	if !l.IsLost() {
		return ""
	}
	return classify(l.err()).kind
}

// LostCode returns the wire code of the server error that ended the lock,
// or NoCode.
func (l *Lock) LostCode() int {
	if !l.IsLost() {
		return NoCode
	}
	return classify(l.err()).code
}

// SetLostListener sets the listener to call when the lock is lost (nil:
// none), replacing the previous one. A listener hears the loss once; if the
// lock is already lost, it hears it right away (on another thread), so no
// loss goes unheard however late the listener is set.
func (l *Lock) SetLostListener(listener LostListener) {
	l.mu.Lock()
	l.listener, l.notified = listener, false
	l.mu.Unlock()
	if l.inner == nil {
		return
	}
	select {
	case <-l.inner.Done():
		go l.notify()
	default:
	}
}

// notify calls the listener once the lock has ended by loss.
func (l *Lock) notify() {
	err := l.err()
	if !errors.Is(err, client.ErrLockLost) {
		return
	}
	l.mu.Lock()
	listener := l.listener
	if listener == nil || l.notified {
		l.mu.Unlock()
		return
	}
	l.notified = true
	l.mu.Unlock()
	listener.OnLost(classify(err).code, err.Error())
}

// Unlock releases the lock: the server hands it to the next waiter at once.
// For a held lock it returns once the server has let the lock go (or after
// at most a second without that confirmation); after a loss it closes the
// connection at once. It may be called again, also after loss.
//
// (Named Unlock, not Release, because Objective-C reserves -release for
// reference counting: a method of that name does not compile under ARC.)
func (l *Lock) Unlock() {
	if l.inner == nil {
		return
	}
	// The Go client's Release cannot fail in a way the app could act on: the
	// connection is closed either way.
	_ = l.inner.Release()
}
