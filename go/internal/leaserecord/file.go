package leaserecord

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/monolock/monolock/go/internal/durable"
)

// FileName is the file, in the data directory, that records how long
// a server restarted after a crash must hold back which locks (see
// Record).
const FileName = "leases"

// legacyFileName is the record of earlier versions: one number, the
// longest lease ever acknowledged. It is read as a wait for every lock and
// removed after the first full write.
const legacyFileName = "max-lease-ms"

// compactSlack is how far the file may grow past three times its content
// before a write rewrites it from scratch instead of appending.
const compactSlack = 64 << 10

const header = "monolock lease record v1\n"

// fileStore is the record of a standalone server, in its data directory.
//
// On disk it is a text file: a header line, then lines "all MS" and
// "lock MS NAME" (NAME quoted as in Go), later lines overriding earlier
// ones; "lock 0 NAME" drops NAME. The record of a clean stop may state a
// shared lock's held-back permits instead, one line "permit MS LIMIT
// NAME" each; a later "lock" line for NAME replaces them. Writes append and fsync; a full write
// replaces the file (write, fsync, rename, fsync the directory). Its size
// stays proportional to the long leases of live sessions and the waits
// being kept.
type fileStore struct {
	dir, path string
	legacy    bool // legacyFileName is there, until a full write replaced it
	fresh     bool // a new data directory: no record yet is no loss

	permits map[string]Permits // what Load read, for LoadedPermits

	// Touched only by the write in progress (the Record's writer), and by
	// Load and Close, when none can be.
	file      *os.File // the append handle; nil: the next write must be full
	size      int64
	rewritten int64 // the size of the last full write
}

// OpenFile opens the record in dir, which must be locked (tokenstore.Open)
// so that no other server writes it.
// CheckFile reads the record in dir as OpenFile would, and returns the
// error OpenFile would return for it, writing nothing: for
// --check-config, which may run beside the server that uses dir.
func CheckFile(dir string, freshDir bool) error {
	_, _, err := (&fileStore{dir: dir, path: filepath.Join(dir, FileName), fresh: freshDir}).Load()
	return err
}

func OpenFile(dir string, opts Options) (*Record, error) {
	return OpenStore(&fileStore{dir: dir, path: filepath.Join(dir, FileName), fresh: opts.FreshDir}, opts)
}

// LoadedPermits returns the held-back permits Load read, by name.
func (f *fileStore) LoadedPermits() map[string]Permits { return f.permits }

func (f *fileStore) Load() (time.Duration, map[string]time.Duration, error) {
	all, locks, permits, found, err := load(f.path, time.Now())
	if err != nil {
		return 0, nil, err
	}
	legacyAll, hasLegacy, err := loadLegacy(filepath.Join(f.dir, legacyFileName))
	if err != nil {
		return 0, nil, err
	}
	if !found && !hasLegacy && !f.fresh {
		// Every run of a server writes the record when it starts: in a
		// used directory it was removed, or is a link to nothing.
		return 0, nil, fmt.Errorf("leaserecord: the lease record %s is missing (or a link to nothing) in a data directory that a server has used: "+
			"refusing to start, since a server restarted after a crash must hold back the locks that its clients may still count on. "+
			"Restore the file; or, once no client can still count on a lock (the server has been down for longer than its longest lease and --lock-delay), "+
			"start afresh with an empty record: printf '%s' > %s", f.path, strings.TrimSuffix(header, "\n")+`\n`, f.path)
	}
	f.legacy = hasLegacy
	f.permits = permits
	return max(all, legacyAll), locks, nil
}

func (f *fileStore) WantsFull() bool {
	return f.file == nil || f.size > 3*f.rewritten+compactSlack
}

func (f *fileStore) Write(c Change) error {
	var b bytes.Buffer
	if c.Full {
		b.WriteString(header)
	}
	if c.AllSet {
		fmt.Fprintf(&b, "all %d\n", c.All.Milliseconds())
	}
	for _, s := range c.Locks {
		if len(s.Permits) == 0 {
			fmt.Fprintf(&b, "lock %d %s\n", s.Wait.Milliseconds(), strconv.Quote(s.Name))
			continue
		}
		for _, wait := range s.Permits {
			fmt.Fprintf(&b, "permit %d %d %s\n", wait.Milliseconds(), s.Limit, strconv.Quote(s.Name))
		}
	}
	if c.Full {
		return f.replace(b.Bytes())
	}
	n, err := f.file.Write(b.Bytes())
	f.size += int64(n)
	if err == nil {
		err = f.file.Sync()
	}
	if err != nil {
		f.Close() // the next write replaces the file
	}
	return err
}

// replace writes content as the whole file, and drops the legacy file
// once the new one states what it said.
func (f *fileStore) replace(content []byte) error {
	f.Close()
	if err := durable.WriteFile(f.path, content); err != nil {
		return err
	}
	f.size, f.rewritten = int64(len(content)), int64(len(content))
	if h, err := os.OpenFile(f.path, os.O_WRONLY|os.O_APPEND, 0); err == nil {
		f.file = h // else the next write replaces the file again
	}
	if f.legacy {
		legacy := filepath.Join(f.dir, legacyFileName)
		if err := os.Remove(legacy); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("replace %s: %w", legacy, err)
		}
		if err := durable.SyncDir(f.dir); err != nil {
			return fmt.Errorf("replace %s: %w", legacy, err)
		}
		f.legacy = false
	}
	return nil
}

func (f *fileStore) Close() {
	if f.file != nil {
		f.file.Close()
		f.file = nil
	}
}

// load reads a record: the wait for every lock, the waits by name (0:
// none), and the held-back permits by name, their ends counted from now.
// A last line without its newline is a write that a crash cut short,
// whose claim was never acknowledged: it is ignored.
func load(path string, now time.Time) (all time.Duration, locks map[string]time.Duration, permits map[string]Permits, found bool, err error) {
	locks, permits = make(map[string]time.Duration), make(map[string]Permits)
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return 0, locks, permits, false, nil
	}
	if err != nil {
		return 0, nil, nil, false, fmt.Errorf("leaserecord: cannot read the lease record: %w: refusing to start without it; "+
			"it must be a regular file that the server can read and write", err)
	}
	bad := func(line string) error {
		return fmt.Errorf("leaserecord: lease record %s holds %q: refusing to start; once no client of this server can still count on a lock, replace it with an empty record: printf '%s' > %s",
			path, durable.Quote([]byte(line)), strings.TrimSuffix(header, "\n")+`\n`, path)
	}
	text, ok := strings.CutPrefix(string(b), header)
	if !ok {
		return 0, nil, nil, true, bad(string(b))
	}
	if i := strings.LastIndexByte(text, '\n'); i+1 < len(text) {
		text = text[:i+1] // a torn last line
	}
	for line := range strings.Lines(text) {
		line = strings.TrimSuffix(line, "\n")
		kind, rest, _ := strings.Cut(line, " ")
		msText, name, _ := strings.Cut(rest, " ")
		ms, perr := strconv.ParseInt(msText, 10, 64)
		if perr != nil || ms < 0 || ms > math.MaxInt64/int64(time.Millisecond) {
			return 0, nil, nil, true, bad(line)
		}
		wait := time.Duration(ms) * time.Millisecond
		switch kind {
		case "all":
			if name != "" {
				return 0, nil, nil, true, bad(line)
			}
			all = wait
		case "lock":
			n, uerr := strconv.Unquote(name)
			if uerr != nil || n == "" {
				return 0, nil, nil, true, bad(line)
			}
			delete(permits, n)
			if wait == 0 {
				delete(locks, n)
			} else {
				locks[n] = wait
			}
		case "permit":
			limitText, quoted, _ := strings.Cut(name, " ")
			limit, lerr := strconv.ParseUint(limitText, 10, 16)
			n, uerr := strconv.Unquote(quoted)
			if lerr != nil || limit == 0 || uerr != nil || n == "" || wait == 0 {
				return 0, nil, nil, true, bad(line)
			}
			p := permits[n]
			if len(p.Until) > 0 && p.Limit != uint16(limit) {
				return 0, nil, nil, true, bad(line) // one limit per name
			}
			p.Limit, p.Until = uint16(limit), append(p.Until, now.Add(wait))
			permits[n] = p
			delete(locks, n)
		default:
			return 0, nil, nil, true, bad(line)
		}
	}
	return all, locks, permits, true, nil
}

// loadLegacy reads the max-lease-ms of earlier versions.
func loadLegacy(path string) (time.Duration, bool, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("leaserecord: read the lease record: %w", err)
	}
	ms, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil || ms < 0 || ms > math.MaxInt64/int64(time.Millisecond) {
		return 0, false, fmt.Errorf("leaserecord: lease record %s holds %q: delete it only if no client of this server can still hold a lock",
			path, durable.Quote(b))
	}
	return time.Duration(ms) * time.Millisecond, true, nil
}
