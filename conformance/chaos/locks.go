package chaos

import (
	"fmt"
	"strconv"
	"strings"
)

// Lock is one lock name the workers contend for and the mix of claims they
// make on it. A worker stays on one lock for the whole run, so every lock
// always has claimants and a time without a holder is the cell's doing.
type Lock struct {
	Name string
	// Limit bounds the shared holders at once (a semaphore's permits);
	// 0: no bound. Every shared claim on the name carries it, as the
	// protocol requires.
	Limit int
	// Exclusive is the share of claims that are exclusive: 1 for a plain
	// lock, the rest of the claims are shared.
	Exclusive float64
	// Election: the claims are candidates (exclusive, each with its
	// worker's name as its value), and every worker on the lock also
	// watches it (observe) through its own proxies.
	Election bool
}

// sharedMixExclusive is the share of exclusive claims on a lock of shared
// claims: enough writers to keep the readers' grants and the writers'
// waits interleaving, enough readers to fill a semaphore's permits.
const sharedMixExclusive = 1.0 / 3

// Lock kinds, as -locks spells them.
const (
	KindExclusive = "exclusive"   // every claim exclusive
	KindShared    = "shared"      // shared claims without a limit, a third exclusive
	KindSemaphore = "semaphore:N" // shared claims with limit N, a third exclusive
	KindElection  = "election"    // candidates with values, each also a watcher
)

// DefaultLocks is what a run contends for unless told otherwise: readers
// beside writers on one name, a semaphore of two permits beside exclusive
// claims on another, and an election whose candidates also watch it.
// Every name sees exclusive claims, so every rule of the analyser has
// something to check.
const DefaultLocks = "shared,semaphore:2,election"

// ParseLocks reads a comma-separated list of lock kinds (KindExclusive,
// KindShared, KindSemaphore with its N) into locks named chaos/<kind>.
func ParseLocks(spec string) ([]Lock, error) {
	var locks []Lock
	seen := map[string]bool{}
	for _, kind := range strings.Split(spec, ",") {
		kind = strings.TrimSpace(kind)
		var l Lock
		switch {
		case kind == KindExclusive:
			l = Lock{Name: "chaos/lock", Exclusive: 1}
		case kind == KindElection:
			l = Lock{Name: "chaos/leader", Exclusive: 1, Election: true}
		case kind == KindShared:
			l = Lock{Name: "chaos/shared", Exclusive: sharedMixExclusive}
		case strings.HasPrefix(kind, "semaphore:"):
			n, err := strconv.Atoi(strings.TrimPrefix(kind, "semaphore:"))
			if err != nil || n < 1 || n > 0xffff {
				return nil, fmt.Errorf("lock kind %q: the permits must be 1 to 65535", kind)
			}
			l = Lock{Name: "chaos/semaphore-" + strconv.Itoa(n), Limit: n, Exclusive: sharedMixExclusive}
		default:
			return nil, fmt.Errorf("lock kind %q: want %s, %s, %s or %s", kind, KindExclusive, KindShared, KindSemaphore, KindElection)
		}
		if seen[l.Name] {
			return nil, fmt.Errorf("lock kind %q given twice", kind)
		}
		seen[l.Name] = true
		locks = append(locks, l)
	}
	return locks, nil
}

// String says what the lock is, for the report.
func (l Lock) String() string {
	switch {
	case l.Election:
		return l.Name + " (an election: candidates with values, each also watching)"
	case l.Exclusive >= 1:
		return l.Name + " (exclusive)"
	case l.Limit > 0:
		return fmt.Sprintf("%s (semaphore of %d, %.0f%% exclusive claims)", l.Name, l.Limit, 100*l.Exclusive)
	default:
		return fmt.Sprintf("%s (shared, %.0f%% exclusive claims)", l.Name, 100*l.Exclusive)
	}
}

// allows reports whether holders that believe they hold the lock at one
// instant are within its rules: an exclusive holder alone, or shared
// holders no more than the limit.
func (l Lock) allows(holders []Window) bool {
	if len(holders) <= 1 {
		return true
	}
	for _, h := range holders {
		if !h.Shared {
			return false
		}
	}
	return l.Limit == 0 || len(holders) <= l.Limit
}
