// Package systems names the lock services under test (monolock and its
// peers) and gives the small interface every one of them is used through.
// It links no peer's client library: monolock's and the bare client's
// implementations are here, the peers' are in package peers.
package systems

import (
	"context"
	"crypto/tls"
	"errors"
	"time"
)

// System is one lock service, connected and ready to hand out workers.
type System interface {
	// Name is the label used in tables and charts.
	Name() string
	// Worker returns a client for one worker goroutine. Implementations
	// share what their recipe shares (a connection pool, a session).
	Worker(ctx context.Context) (Worker, error)
	// Close releases everything the system opened on the client side.
	Close() error
}

// Worker acquires locks for one goroutine at a time.
type Worker interface {
	// Acquire blocks until name is held or ctx ends.
	Acquire(ctx context.Context, name string) (Held, error)
	Close() error
}

// Mode is how a claim holds its name: exclusive (the zero Mode), shared
// with any number of other shared claims, or, with Limit > 0, as one of at
// most Limit shared holders (a semaphore of Limit permits).
type Mode struct {
	Shared bool
	Limit  int
}

// Exclusive is the Mode of a plain lock.
var Exclusive = Mode{}

// ModeWorker is a Worker of a system that also has shared claims. A
// system without semaphores refuses a Limit with ErrNoSemaphore.
type ModeWorker interface {
	Worker
	AcquireMode(ctx context.Context, name string, m Mode) (Held, error)
}

// ErrNoSemaphore is a ModeWorker's answer to a Limit it has no recipe for.
var ErrNoSemaphore = errors.New("no semaphore: the system has no bounded shared claim")

// Held is one granted lock.
type Held interface {
	Release() error
}

// Options are the knobs every recipe takes.
type Options struct {
	// Lease is the lease or TTL: how long a silent holder keeps the lock.
	Lease time.Duration
	// KeepAlive makes a holder refresh its lease while it holds the lock,
	// for recipes where the caller must do so itself (Redis). Off for the
	// throughput workloads, whose holders release at once.
	KeepAlive bool
	// Pool is the connection pool size for pooled recipes.
	Pool int
	// TLS is the client's TLS configuration (the CA that signs the
	// server's certificate) for the systems that speak TLS (see TLS).
	TLS *tls.Config
}

// Names of the systems, in report order.
const (
	// Floor is the bare exchange of the protocol: the bare client against
	// a server that does nothing else (package floor), the most any
	// implementation could reach. Throughput workload only.
	Floor = "floor"
	// SessionFloor is the bare exchange of a claim on an open session
	// (protocol version 4): the bare session client against the floor
	// server's session mode. Throughput workload only.
	SessionFloor = "session-floor"
	// MonolockBare is the floor's bare client against `monolock serve`.
	// Throughput workload only.
	MonolockBare = "monolock-bare"
	// MonolockSessionBare is the bare session client against `monolock
	// serve`. Throughput workload only.
	MonolockSessionBare = "monolock-session-bare"
	// Monolock is the canonical Go client against `monolock serve`.
	Monolock = "monolock"
	// MonolockBefore is Monolock (the canonical Go client's single claims)
	// against a `monolock serve` built from an older revision of go/ (the
	// bench's -before flag), so that one run measures the single claim
	// before and after a change. Throughput workload only.
	MonolockBefore = "monolock-before"
	// MonolockSession is the canonical Go client's sessions (protocol
	// version 4) against `monolock serve`: a session per worker, many
	// claims on its one connection. Throughput workload only, for now.
	MonolockSession = "monolock-session"
	// MonolockTLS is Monolock over TLS, the client's session cache on
	// (its default): a claim's connection resumes the TLS session of an
	// earlier one. Throughput workload only.
	MonolockTLS = "monolock-tls"
	// MonolockTLSNoResume is MonolockTLS with resumption off: every claim
	// pays a full handshake. Throughput workload only.
	MonolockTLSNoResume = "monolock-tls-noresume"
	// MonolockSessionTLS is MonolockSession over TLS: one handshake per
	// session. Throughput workload only.
	MonolockSessionTLS = "monolock-session-tls"
	Redis              = "redis"
	Etcd               = "etcd"
	Postgres           = "postgres"
	ZooKeeper          = "zookeeper"
)

// All lists every system in report order.
var All = []string{Floor, SessionFloor, MonolockBare, MonolockSessionBare, Monolock, MonolockBefore, MonolockSession,
	MonolockTLS, MonolockTLSNoResume, MonolockSessionTLS, Redis, Etcd, Postgres, ZooKeeper}

// ThroughputOnly reports whether name is measured in the uncontended
// throughput workload alone: the floors grant every claim (they keep no
// locks), and the bare clients neither queue nor heartbeat. The TLS
// systems and MonolockBefore are there to be compared with their twins
// (MonolockBefore with Monolock), and
// MonolockSession is also in the handoff workload (see Handoff).
func ThroughputOnly(name string) bool {
	switch name {
	case Floor, SessionFloor, MonolockBare, MonolockSessionBare, MonolockBefore, MonolockSession,
		MonolockTLS, MonolockTLSNoResume, MonolockSessionTLS:
		return true
	}
	return false
}

// Handoff reports whether the contended handoff workload measures name:
// every system that is not throughput-only, and MonolockSession, whose
// handoff is held to PostgreSQL's.
func Handoff(name string) bool { return !ThroughputOnly(name) || name == MonolockSession }

// TLS reports whether name speaks TLS to a server started with a
// certificate.
func TLS(name string) bool {
	switch name {
	case MonolockTLS, MonolockTLSNoResume, MonolockSessionTLS:
		return true
	}
	return false
}

// Local reports whether name runs against a `monolock serve` that the
// benchmark starts for it (for MonolockBefore, the older revision's).
func Local(name string) bool {
	switch name {
	case Monolock, MonolockBefore, MonolockBare, MonolockSession, MonolockSessionBare, MonolockTLS, MonolockTLSNoResume, MonolockSessionTLS:
		return true
	}
	return false
}

// Peer reports whether name is a peer that scripts/peers.sh runs.
func Peer(name string) bool {
	switch name {
	case Redis, Etcd, Postgres, ZooKeeper:
		return true
	}
	return false
}

// Peer addresses, as started by scripts/peers.sh.
const (
	RedisAddr     = "127.0.0.1:16379"
	EtcdAddr      = "127.0.0.1:12379"
	PostgresAddr  = "127.0.0.1:15432"
	ZooKeeperAddr = "127.0.0.1:12181"
)
