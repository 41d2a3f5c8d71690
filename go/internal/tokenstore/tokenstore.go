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
)

// FileName is the name of the high-water mark file inside the data directory.
const FileName = "token-hwm"

// lockFileName guards the data directory against a second server using it at
// the same time, which would break monotonicity.
const lockFileName = "lock"

// DefaultBlockSize is how many tokens one fsync reserves.
const DefaultBlockSize = 1000

// fileHeader starts the mark file, so a stray or truncated file is recognised
// as corrupt rather than read as a small number.
const fileHeader = "monolock token high-water mark v1\n"

// ErrExhausted is returned when the 64-bit token space is used up.
var ErrExhausted = errors.New("tokenstore: fencing tokens exhausted")

// Store issues fencing tokens. It is safe for concurrent use.
type Store struct {
	mu        sync.Mutex
	path      string // the mark file
	blockSize uint64
	next      uint64 // the token Next returns
	reserved  uint64 // the highest token recorded durably; next <= reserved+1
	lock      *os.File
	closed    bool
	exhausted bool // the last token, MaxUint64, was handed out
}

// Options tune a Store. The zero value is the production setting.
type Options struct {
	// BlockSize is the number of tokens reserved per durable write;
	// 0 means DefaultBlockSize.
	BlockSize uint64
}

// Open opens (creating if needed) the store in dir. It takes an exclusive
// lock on the directory, reads the recorded high-water mark and reserves the
// first block above it. A mark file that cannot be read back exactly is an
// error: starting over from 1 could reissue tokens.
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
	s := &Store{
		path:      filepath.Join(dir, FileName),
		blockSize: opts.BlockSize,
		lock:      lock,
	}
	if s.blockSize == 0 {
		s.blockSize = DefaultBlockSize
	}
	mark, err := readMark(s.path)
	if err != nil {
		lock.Close()
		return nil, err
	}
	if mark == math.MaxUint64 {
		lock.Close()
		return nil, ErrExhausted
	}
	s.next, s.reserved = mark+1, mark
	if err := s.reserve(); err != nil {
		lock.Close()
		return nil, err
	}
	return s, nil
}

// Next returns a new token, larger than every token issued before by this
// data directory. It blocks for a durable write once per block.
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
		if err := s.reserve(); err != nil {
			return 0, err
		}
	}
	t := s.next
	if t == math.MaxUint64 {
		s.exhausted = true // the counter must not wrap to 0
	} else {
		s.next++
	}
	return t, nil
}

// Mark returns the durably recorded high-water mark.
func (s *Store) Mark() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reserved
}

// Close releases the directory lock. It writes nothing: the recorded mark is
// already above every token handed out, so a crash and a Close leave the same
// state behind.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.lock.Close()
}

// reserve records a new block above the current one. Caller holds s.mu (or
// owns s exclusively).
func (s *Store) reserve() error {
	if s.reserved == math.MaxUint64 {
		return ErrExhausted
	}
	top := s.reserved + s.blockSize
	if top < s.reserved { // overflow: the last, shorter block
		top = math.MaxUint64
	}
	if err := writeMark(s.path, top); err != nil {
		return err
	}
	s.reserved = top
	return nil
}

// readMark returns the recorded mark, or 0 when there is no file yet.
func readMark(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("tokenstore: read high-water mark: %w", err)
	}
	text, ok := strings.CutPrefix(string(b), fileHeader)
	digits, ok2 := strings.CutSuffix(text, "\n")
	mark, perr := strconv.ParseUint(digits, 10, 64)
	if !ok || !ok2 || perr != nil {
		return 0, fmt.Errorf("tokenstore: corrupt high-water mark file %s (%q): "+
			"refusing to start, since tokens could go backwards; restore the file, "+
			"or write a mark above every token ever issued", path, snippet(b))
	}
	return mark, nil
}

func snippet(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}

// writeMark replaces the mark file atomically and durably: write a temporary
// file, fsync it, rename it over the old one, fsync the directory. A crash at
// any point leaves either the old or the new mark, never a torn file.
func writeMark(path string, mark uint64) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("tokenstore: write high-water mark: %w", err)
	}
	_, err = f.WriteString(fileHeader + strconv.FormatUint(mark, 10) + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(path))
	}
	if err != nil {
		return fmt.Errorf("tokenstore: write high-water mark: %w", err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
