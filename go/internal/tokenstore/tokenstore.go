// Package tokenstore hands out the server's fencing tokens and keeps them
// monotonic across crashes.
//
// Tokens come from one counter. Instead of writing every token to disk, the
// store reserves a block of tokens at a time: it durably records the highest
// token of the block (the high-water mark) before handing out the first token
// of that block. After a crash, even kill -9 or power loss, the next run starts
// above the recorded mark, so no token is ever issued twice or goes backwards.
// Tokens lost in an unfinished block are skipped, which fencing allows.
package tokenstore

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/monolock/monolock/go/internal/durable"
)

// FileName is the name of the high-water mark file inside the data directory.
const FileName = "token-hwm"

// lockFileName guards the data directory against a second server using it at
// the same time, which would break monotonicity.
const lockFileName = "lock"

// DefaultBlockSize is how many tokens the first fsync reserves. Half of
// it is the head start of the next reservation: 32,768 grants, seconds at
// any rate the server sustains, where an fsync on a loaded disk can take
// hundreds of milliseconds (with 1,000, a burst of fresh claims on a
// loaded 2-core machine ran a new server's first block out and was
// answered WAITING). Tokens are 64 bits: what a crash skips is no cost.
const DefaultBlockSize = 1 << 16

// MaxBlockSize bounds the growth of blocks (see Store): at most this many
// tokens are skipped by a crash.
const MaxBlockSize = 1 << 20

// DefaultStarveWait is how long Next waits for a reservation that is being
// written when the reserved tokens have run out (see Options.StarveWait).
const DefaultStarveWait = 250 * time.Millisecond

// fileHeader starts the mark file, so a stray or truncated file is recognised
// as corrupt rather than read as a small number.
const fileHeader = "monolock token high-water mark v1\n"

// markerFileName marks a data directory that has been used. It is written
// when the directory is first set up, so a mark file that disappears later
// (a cleanup job, a configuration tool) is noticed instead of taken for a
// new directory, which would restart tokens at 1.
const markerFileName = "monolock-data"

const markerContent = "This directory holds the state of a monolock server. Do not delete token-hwm.\n"

// DefaultRetryEvery is how often a failed reservation is tried again.
const DefaultRetryEvery = time.Second

// ErrExhausted is returned when the 64-bit token space is used up.
var ErrExhausted = errors.New("tokenstore: fencing tokens exhausted")

// UnavailableError is returned by Next while no token is durably reserved:
// the background reservation has not finished, or it failed (Cause). It is
// temporary: Options.OnReady is called once tokens are available again.
type UnavailableError struct{ Cause error }

func (e *UnavailableError) Error() string {
	if e.Cause == nil {
		return "tokenstore: no token reserved yet"
	}
	return "tokenstore: no token reserved: " + e.Cause.Error()
}

func (e *UnavailableError) Unwrap() error { return e.Cause }

// Temporary reports that waiting helps.
func (e *UnavailableError) Temporary() bool { return true }

// Store issues fencing tokens. It is safe for concurrent use.
//
// The next block is reserved in the background once half of the current
// one is used. When the tokens of a block were used up faster than that
// write took (the write finished with less than half of its head start
// left, or not in time), the next blocks are twice as large, up to
// MaxBlockSize: the reservation keeps ahead of any rate the server can
// grant at. Should the tokens still run out while a write is under way,
// Next waits for that write, for at most StarveWait; a grant is refused
// (UnavailableError) only when the store cannot write: the write failed, or
// it took longer than that.
type Store struct {
	mu        sync.Mutex
	persist   func(top uint64) error // records a block durably
	blockSize uint64                 // of the next reservation; grows, see Store
	next      uint64                 // the token Next returns
	reserved  uint64                 // the highest token recorded durably; next <= reserved+1
	lock      *os.File               // the data directory's lock; nil without one
	fresh     bool                   // Open marked a new data directory as used
	closed    bool
	exhausted bool // the last token, MaxUint64, was handed out

	reserving   bool      // a background reservation is running
	reservedAt  time.Time // when it started
	startNext   uint64    // next when it started
	startAhead  uint64    // the tokens reserved but not yet issued when it started
	starved     bool      // Next found no token while it ran
	reserveDone *sync.Cond
	starveWait  time.Duration
	failure     error     // the last reservation's error, nil once one succeeds
	failedAt    time.Time // when it failed: the next try waits retryEvery
	retryEvery  time.Duration
	onReady     func()
	onFailure   func(error)
	reservation sync.WaitGroup // the background reservation, for Close
}

// Options tune a Store. The zero value is the production setting.
type Options struct {
	// BlockSize is the number of tokens reserved per durable write;
	// 0 means DefaultBlockSize.
	BlockSize uint64
	// Floor makes every token issued larger than Floor, whatever the mark
	// says. It is the operator's way to restart a directory whose mark was
	// lost (--token-floor): without it such a directory refuses to open.
	Floor uint64
	// RetryEvery spaces the attempts after a failed reservation; 0 means
	// DefaultRetryEvery.
	RetryEvery time.Duration
	// StarveWait is how long Next may wait, when the reserved tokens have
	// run out, for the reservation that is being written; 0 means
	// DefaultStarveWait. The caller's own locks stay held meanwhile (the
	// server's lock table), so it is short: a write slower than this is a
	// store that cannot keep up, and claims queue until it lands.
	StarveWait time.Duration
	// OnReady, if set, is called (from a goroutine of the store) when a
	// reservation makes tokens available after Next had none to give.
	OnReady func()
	// OnFailure, if set, is called with every failed background
	// reservation: at most once per RetryEvery.
	OnFailure func(error)
}

// Open opens (creating if needed) the store in dir. It takes an exclusive
// lock on the directory, reads the recorded high-water mark and reserves the
// first block above it. A mark file that cannot be read back exactly is an
// error, and so is a missing one in a directory that has been used
// (opts.Floor overrides that): starting over from 1 could reissue tokens.
func Open(dir string, opts Options) (*Store, error) {
	if dir == "" {
		return nil, errors.New("tokenstore: empty data directory")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("tokenstore: create data directory: %w", err)
	}
	lock, err := lockDir(filepath.Join(dir, lockFileName))
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, FileName)
	mark, fresh, err := openMark(dir, path, opts.Floor)
	if err != nil {
		lock.Close()
		return nil, err
	}
	s, err := New(mark, func(top uint64) error { return writeMark(path, top) }, opts)
	if err != nil {
		lock.Close()
		return nil, err
	}
	s.lock, s.fresh = lock, fresh
	return s, nil
}

// Fresh reports whether Open found a data directory that no server had
// used: the other state files of a used one must be there too.
func (s *Store) Fresh() bool { return s.fresh }

// New returns a store that issues tokens above mark and records each block
// with persist, which must be durable when it returns nil: the token
// high-water mark of an HA cell lives in etcd, not in a file. New reserves
// the first block before it returns. opts.Floor raises mark.
func New(mark uint64, persist func(top uint64) error, opts Options) (*Store, error) {
	s := &Store{
		persist:    persist,
		blockSize:  opts.BlockSize,
		retryEvery: opts.RetryEvery,
		onReady:    opts.OnReady,
		onFailure:  opts.OnFailure,
	}
	if s.blockSize == 0 {
		s.blockSize = DefaultBlockSize
	}
	if s.retryEvery == 0 {
		s.retryEvery = DefaultRetryEvery
	}
	s.starveWait = opts.StarveWait
	if s.starveWait == 0 {
		s.starveWait = DefaultStarveWait
	}
	s.reserveDone = sync.NewCond(&s.mu)
	mark = max(mark, opts.Floor)
	if mark == math.MaxUint64 {
		return nil, ErrExhausted
	}
	s.next, s.reserved = mark+1, mark
	top, err := s.nextTop()
	if err == nil {
		err = persist(top)
	}
	if err != nil {
		return nil, err
	}
	s.reserved = top
	return s, nil
}

// Check reads the state of the data directory dir as Open would, and
// returns the error Open would return for it, without writing or locking
// anything: for --check-config, which may run beside the server that uses
// dir. fresh reports a directory no server has used yet (or none at all).
func Check(dir string, floor uint64) (fresh bool, err error) {
	_, used, err := checkMark(dir, filepath.Join(dir, FileName), floor)
	return !used, err
}

// checkMark returns the recorded mark and whether dir has been used. A
// used directory (marker present) without a mark is refused unless floor
// is given.
func checkMark(dir, path string, floor uint64) (mark uint64, used bool, err error) {
	mark, found, err := readMark(path)
	if err != nil {
		return 0, false, err
	}
	_, statErr := os.Stat(filepath.Join(dir, markerFileName))
	used = statErr == nil
	if used && !found && floor == 0 {
		return 0, false, fmt.Errorf("tokenstore: data directory %s has been used, but its token high-water mark %s is missing: "+
			"refusing to start, since tokens would restart at 1 and go backwards. Restore the file from a backup, "+
			"or start once with --token-floor N, N at least the largest token this server ever issued", dir, path)
	}
	return mark, used, nil
}

// openMark returns the recorded mark (New raises it to the floor), as
// checkMark finds it; a new directory is marked as used, and fresh says so.
func openMark(dir, path string, floor uint64) (mark uint64, fresh bool, err error) {
	mark, used, err := checkMark(dir, path, floor)
	if err != nil {
		return 0, false, err
	}
	if !used {
		if err := durable.WriteFile(filepath.Join(dir, markerFileName), []byte(markerContent)); err != nil {
			return 0, false, fmt.Errorf("tokenstore: mark data directory as used: %w", err)
		}
	}
	return mark, !used, nil
}

// Next returns a new token, larger than every token issued before by this
// data directory. When the reserved tokens have run out it waits for the
// reservation under way, for at most StarveWait since that write began;
// without a token then, it returns an *UnavailableError.
func (s *Store) Next() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, errors.New("tokenstore: closed")
	}
	if s.exhausted {
		return 0, ErrExhausted
	}
	if s.next > s.reserved {
		if s.reserved == math.MaxUint64 {
			return 0, ErrExhausted
		}
		s.reserveLocked()
		s.awaitReservationLocked()
		if s.next > s.reserved {
			return 0, &UnavailableError{Cause: s.failure}
		}
	}
	t := s.next
	if t == math.MaxUint64 {
		s.exhausted = true // the counter must not wrap to 0
	} else {
		s.next++
	}
	if s.reserved-t < s.blockSize/2 {
		s.reserveLocked() // half the block is used: reserve the next one ahead
	}
	return t, nil
}

// InHand reports whether Next returns without waiting: a reserved token is
// left (or none can ever be issued again).
func (s *Store) InHand() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed || s.exhausted || s.next <= s.reserved
}

// Mark returns the durably recorded high-water mark.
func (s *Store) Mark() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reserved
}

// Failure returns the error of the last reservation if it failed and none
// has succeeded since (for readiness and metrics), else nil.
func (s *Store) Failure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failure
}

// Close releases the directory lock once a background reservation has
// finished. It writes nothing: the recorded mark is already above every
// token handed out, so a crash and a Close leave the same state behind.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.reservation.Wait()
	if s.lock == nil {
		return nil
	}
	return s.lock.Close()
}

// awaitReservationLocked waits while a reservation is being written, up to
// StarveWait after it began. A write that takes longer is not waited for
// again: every later call returns at once until it lands. Caller holds s.mu.
func (s *Store) awaitReservationLocked() {
	if !s.reserving {
		return
	}
	s.starved = true
	deadline := s.reservedAt.Add(s.starveWait)
	wait := time.Until(deadline)
	if wait <= 0 {
		return
	}
	timer := time.AfterFunc(wait, func() {
		s.mu.Lock()
		s.reserveDone.Broadcast()
		s.mu.Unlock()
	})
	defer timer.Stop()
	for s.reserving && !s.closed && time.Now().Before(deadline) {
		s.reserveDone.Wait()
	}
}

// nextTop is the mark of the block above the current one.
func (s *Store) nextTop() (uint64, error) {
	if s.reserved == math.MaxUint64 {
		return 0, ErrExhausted
	}
	top := s.reserved + s.blockSize
	if top < s.reserved { // overflow: the last, shorter block
		top = math.MaxUint64
	}
	return top, nil
}

// reserveLocked starts reserving the next block in the background, unless
// one is running, the space is used up, or the last one failed less than
// retryEvery ago (then a timer tries again: one write per interval, never
// one per caller). Caller holds s.mu.
func (s *Store) reserveLocked() {
	if s.reserving || s.closed {
		return
	}
	top, err := s.nextTop()
	if err != nil {
		return
	}
	if s.failure != nil && time.Since(s.failedAt) < s.retryEvery {
		return
	}
	s.reserving = true
	s.reservedAt, s.startNext, s.startAhead, s.starved = time.Now(), s.next, s.reserved+1-s.next, false
	s.reservation.Add(1)
	go s.reserve(top)
}

// growLocked doubles the block size, up to MaxBlockSize, after a
// reservation during which the grants used more than half of the tokens
// that were left when it began, or ran out of them: the next write then
// starts further ahead. Caller holds s.mu.
func (s *Store) growLocked() {
	used := s.next - s.startNext
	if (s.starved || used*2 > s.startAhead) && s.blockSize < MaxBlockSize {
		s.blockSize = min(2*s.blockSize, MaxBlockSize)
	}
}

func (s *Store) reserve(top uint64) {
	defer s.reservation.Done()
	err := s.persist(top)
	s.mu.Lock()
	s.reserving = false
	starved := s.next > s.reserved
	if err != nil {
		s.failure, s.failedAt = err, time.Now()
		if !s.closed {
			s.reservation.Add(1)
			time.AfterFunc(s.retryEvery, s.retry)
		}
	} else {
		s.reserved, s.failure = top, nil
		s.growLocked()
	}
	s.reserveDone.Broadcast()
	s.mu.Unlock()
	switch {
	case err != nil && s.onFailure != nil:
		s.onFailure(err)
	case err == nil && starved && s.onReady != nil:
		s.onReady()
	}
}

func (s *Store) retry() {
	defer s.reservation.Done()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reserveLocked()
}

// readMark returns the recorded mark; found is false when there is no file.
func readMark(path string) (mark uint64, found bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("tokenstore: read high-water mark: %w", err)
	}
	text, ok := strings.CutPrefix(string(b), fileHeader)
	digits, ok2 := strings.CutSuffix(text, "\n")
	mark, perr := strconv.ParseUint(digits, 10, 64)
	if !ok || !ok2 || perr != nil {
		return 0, false, fmt.Errorf("tokenstore: corrupt high-water mark file %s (%q): "+
			"refusing to start, since tokens could go backwards; restore the file, "+
			"or start with --token-floor N, N at least the largest token ever issued", path, durable.Quote(b))
	}
	return mark, true, nil
}

// writeMark replaces the mark file atomically and durably.
func writeMark(path string, mark uint64) error {
	if err := durable.WriteFile(path, []byte(fileHeader+strconv.FormatUint(mark, 10)+"\n")); err != nil {
		return fmt.Errorf("tokenstore: write high-water mark: %w", err)
	}
	return nil
}

// InUseError is a data directory that another server holds: its lock
// file is locked.
type InUseError struct {
	Lock string // the lock file
}

func (e *InUseError) Error() string {
	return fmt.Sprintf("tokenstore: data directory is in use by another server (%s is locked)", e.Lock)
}
