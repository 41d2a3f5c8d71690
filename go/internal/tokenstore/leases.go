package tokenstore

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// LeaseFileName is the file, in the data directory, that holds the longest
// lease the server has ever acknowledged.
const LeaseFileName = "max-lease-ms"

// LeaseRecord keeps the longest acknowledged lease durably, so that a
// server restarted after a crash can wait it out before its first grant:
// until then a holder of the previous run may still be told, by its own
// clock, that it holds its lock.
type LeaseRecord struct {
	path    string
	mu      sync.Mutex // one write at a time, so the file only grows
	longest atomic.Int64
}

// OpenLeaseRecord reads dir's record; a directory without one records
// nothing yet.
func OpenLeaseRecord(dir string) (*LeaseRecord, error) {
	r := &LeaseRecord{path: filepath.Join(dir, LeaseFileName)}
	b, err := os.ReadFile(r.path)
	if os.IsNotExist(err) {
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tokenstore: read the lease record: %w", err)
	}
	ms, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil || ms < 0 {
		return nil, fmt.Errorf("tokenstore: lease record %s holds %q: delete it only if no client of this server can still hold a lock",
			r.path, snippet(b))
	}
	r.longest.Store(int64(time.Duration(ms) * time.Millisecond))
	return r, nil
}

// Longest is the longest lease recorded.
func (r *LeaseRecord) Longest() time.Duration { return time.Duration(r.longest.Load()) }

// Admit records lease durably if it is longer than the recorded one. A
// session with that lease may be acknowledged only once Admit returned nil.
func (r *LeaseRecord) Admit(lease time.Duration) error {
	if int64(lease) <= r.longest.Load() {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if int64(lease) <= r.longest.Load() {
		return nil
	}
	ms := (lease + time.Millisecond - 1) / time.Millisecond
	if err := writeFileDurably(r.path, []byte(strconv.FormatInt(int64(ms), 10)+"\n")); err != nil {
		return fmt.Errorf("tokenstore: record lease: %w", err)
	}
	r.longest.Store(int64(lease))
	return nil
}
