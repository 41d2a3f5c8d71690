package leaserecord

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testLazy is the lazy-write delay of these tests: short, so that they
// see a dropped wait leave the file quickly.
const testLazy = 20 * time.Millisecond

func openLeases(t *testing.T, dir string) *Record {
	t.Helper()
	r, err := Open(dir, Options{LazyWrite: testLazy, FreshDir: true})
	require.NoError(t, err)
	t.Cleanup(r.Close)
	return r
}

// inherited opens what dir holds now, as the next run would after a
// crash of r at this instant, and returns what it waits out, measured
// from now. r writes nothing more.
func inherited(t *testing.T, r *Record, dir string) (all time.Duration, locks map[string]time.Duration) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, FileName))
	require.NoError(t, err)
	r.Close() // after the copy: Close waits for a write under way
	crashed := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(crashed, FileName), b, 0o600))
	next := openLeases(t, crashed)
	allUntil, until := next.Inherited()
	locks = make(map[string]time.Duration)
	for name, u := range until {
		locks[name] = time.Until(u)
	}
	next.Close()
	return max(time.Until(allUntil), 0), locks
}

func readRecord(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, FileName))
	require.NoError(t, err)
	return string(b)
}

// A lease up to the threshold raises the one bound every lock waits out;
// a longer one is recorded with its name. Each is on disk when Admit
// returns: Close writes nothing, as a crash would not.
func TestLeaseRecordBoundForEveryLockAndLongLeasesByName(t *testing.T) {
	dir := t.TempDir()
	r := openLeases(t, dir)
	all, locks := r.Inherited()
	assert.True(t, all.IsZero(), "a new directory has nothing to wait out")
	assert.Empty(t, locks)

	require.NoError(t, r.Admit("a", 1500*time.Millisecond))
	require.NoError(t, r.Admit("b", time.Second))
	require.NoError(t, r.Admit("long", 30*time.Second))
	require.NoError(t, r.Admit("longer", time.Minute+time.Microsecond))
	// Leases are stated on the grid of coarsen (4 significant bits):
	// 1.5 s is 1536 ms, 30 s 30720 ms, 60.001 s 61440 ms.
	assert.Equal(t, "monolock lease record v1\nall 0\nall 1536\nlock 30720 \"long\"\nlock 61440 \"longer\"\n", readRecord(t, dir))
	wait, byName := inherited(t, r, dir)
	assert.InDelta(t, 1500*time.Millisecond, wait, float64(time.Second), "every lock waits the longest short lease")
	assert.LessOrEqual(t, wait, 1536*time.Millisecond)
	require.Len(t, byName, 2, "only the long leases are recorded by name: %v", byName)
	assert.InDelta(t, 30*time.Second, byName["long"], float64(time.Second))
	assert.Greater(t, byName["longer"], time.Minute-time.Second)
}

// A short lease within the recorded bound writes nothing: the claims of
// the clients' default lease cost no write.
func TestLeaseRecordCoveredLeasesWriteNothing(t *testing.T) {
	dir := t.TempDir()
	r := openLeases(t, dir)
	require.NoError(t, r.Admit("x", 10*time.Second))
	before := readRecord(t, dir)
	info, err := os.Stat(filepath.Join(dir, FileName))
	require.NoError(t, err)
	for i := 0; i < 100; i++ {
		name := fmt.Sprintf("n%d", i)
		require.NoError(t, r.Admit(name, time.Duration(i+1)*100*time.Millisecond))
		r.Done(name, time.Duration(i+1)*100*time.Millisecond)
	}
	time.Sleep(5 * testLazy)
	assert.Equal(t, before, readRecord(t, dir))
	again, err := os.Stat(filepath.Join(dir, FileName))
	require.NoError(t, err)
	assert.Equal(t, info.ModTime(), again.ModTime())
	assert.Equal(t, "monolock lease record v1\nall 0\nall 10000\n", before)
}

// A long-lease session that ended leaves the record within the lazy
// delay; one that goes on keeps its name there. The same name claimed
// again while still recorded costs no write.
func TestLeaseRecordDropsEndedLongLeases(t *testing.T) {
	dir := t.TempDir()
	r := openLeases(t, dir)
	require.NoError(t, r.Admit("gone", time.Minute))
	require.NoError(t, r.Admit("kept", time.Minute))
	require.NoError(t, r.Admit("kept", 20*time.Second))
	r.Done("kept", 20*time.Second) // the other session on it goes on
	r.Done("gone", time.Minute)
	require.Eventually(t, func() bool {
		return strings.HasSuffix(readRecord(t, dir), "lock 0 \"gone\"\n")
	}, 5*time.Second, testLazy)

	_, byName := inherited(t, r, dir)
	assert.Equal(t, []string{"kept"}, keys(byName))
	assert.InDelta(t, coarsen(time.Minute), byName["kept"], float64(time.Second),
		"the longest lease of the name's sessions, although the longer one's session is the one that goes on")

	// Claimed again and let go at once, many times: written once while
	// the name is still recorded (here: the lazy write is an hour away).
	dir2 := t.TempDir()
	churn, err := Open(dir2, Options{LazyWrite: time.Hour, FreshDir: true})
	require.NoError(t, err)
	defer churn.Close()
	require.NoError(t, churn.Admit("churn", time.Minute))
	written := readRecord(t, dir2)
	for i := 0; i < 50; i++ {
		churn.Done("churn", time.Minute)
		require.NoError(t, churn.Admit("churn", time.Minute))
	}
	assert.Equal(t, written, readRecord(t, dir2), "a name still recorded is not written again")
}

func keys(m map[string]time.Duration) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Hold keeps a name's wait after its session is done; the next run holds
// it that long, measured from when it was written, and not longer.
func TestLeaseRecordHoldOutlivesTheSession(t *testing.T) {
	dir := t.TempDir()
	r := openLeases(t, dir)
	require.NoError(t, r.Admit("held", time.Minute))
	r.Hold("held", time.Now().Add(40*time.Second))
	r.Done("held", time.Minute)
	r.Hold("short", time.Now().Add(30*time.Second)) // a lock without a long lease
	require.Eventually(t, func() bool {
		_, byName := recordWaits(t, dir)
		return byName["held"] <= 40*time.Second && byName["short"] > 0
	}, 5*time.Second, testLazy, "written once the session is done")
	_, byName := inherited(t, r, dir)
	assert.InDelta(t, 40*time.Second, byName["held"], float64(time.Second))
	assert.InDelta(t, 30*time.Second, byName["short"], float64(time.Second))
}

// A hold that has passed leaves the record.
func TestLeaseRecordDropsPassedHolds(t *testing.T) {
	dir := t.TempDir()
	r := openLeases(t, dir)
	require.NoError(t, r.Admit("h", time.Minute))
	r.Hold("h", time.Now().Add(100*time.Millisecond))
	r.Done("h", time.Minute)
	require.Eventually(t, func() bool {
		return strings.HasSuffix(readRecord(t, dir), "lock 0 \"h\"\n")
	}, 5*time.Second, testLazy, readRecord(t, dir))
	_, byName := inherited(t, r, dir)
	assert.Empty(t, byName)
}

// After a clean stop only the holds are left: the run's bound for every
// lock and its ended sessions are gone.
func TestLeaseRecordDrainedKeepsOnlyTheHolds(t *testing.T) {
	dir := t.TempDir()
	r := openLeases(t, dir)
	require.NoError(t, r.Admit("short", 5*time.Second))
	require.NoError(t, r.Admit("told", time.Minute))
	require.NoError(t, r.Admit("cut", time.Minute))
	r.Done("told", time.Minute)
	r.Hold("cut", time.Now().Add(20*time.Second))
	r.Done("cut", time.Minute)
	r.Hold("cut-short", time.Now().Add(3*time.Second))
	require.NoError(t, r.Drained())
	assert.Error(t, r.Admit("late", time.Second), "nothing is admitted after the stop")
	assert.Error(t, r.Drained())

	wait, byName := inherited(t, r, dir)
	assert.Zero(t, wait)
	require.Len(t, byName, 2, "%v", byName)
	assert.InDelta(t, 20*time.Second, byName["cut"], float64(time.Second))
	assert.InDelta(t, 3*time.Second, byName["cut-short"], float64(time.Second))

	// Nothing held: the next start has nothing to wait out.
	dir2 := t.TempDir()
	r2 := openLeases(t, dir2)
	require.NoError(t, r2.Admit("x", 5*time.Second))
	require.NoError(t, r2.Admit("y", time.Minute))
	r2.Done("y", time.Minute)
	require.NoError(t, r2.Drained())
	assert.Equal(t, "monolock lease record v1\nall 0\n", readRecord(t, dir2))
}

// What a run inherits stays in the record until it has passed in that
// run: a second crash during the wait leaves it for the run after. Once
// passed, it leaves the record.
func TestLeaseRecordInheritedWaitsSurviveACrashDuringTheWait(t *testing.T) {
	dir := t.TempDir()
	r := openLeases(t, dir)
	require.NoError(t, r.Admit("a", 300*time.Millisecond))
	require.NoError(t, r.Admit("long", 20*time.Second))
	r.Close()

	second := openLeases(t, dir)
	all, locks := second.Inherited()
	assert.WithinDuration(t, time.Now().Add(300*time.Millisecond), all, 200*time.Millisecond)
	assert.WithinDuration(t, time.Now().Add(20*time.Second), locks["long"], time.Second)
	wait, byName := inherited(t, second, dir) // crashes at once
	assert.Greater(t, wait, 100*time.Millisecond)
	assert.Greater(t, byName["long"], 19*time.Second)

	third := openLeases(t, dir)
	require.Eventually(t, func() bool {
		return strings.HasSuffix(readRecord(t, dir), "all 0\n")
	}, 5*time.Second, testLazy, "the inherited bound leaves once passed: %q", readRecord(t, dir))
	// A clean stop during the rest of the wait keeps the rest.
	require.NoError(t, third.Drained())
	wait, byName = inherited(t, third, dir)
	assert.Zero(t, wait)
	assert.Greater(t, byName["long"], 18*time.Second)
	assert.LessOrEqual(t, byName["long"], coarsen(20*time.Second))
}

// The record stays bounded: long-lease sessions that come and go on
// fresh names do not make it grow without limit, and a restart rewrites
// it with only what is in force.
func TestLeaseRecordStaysBounded(t *testing.T) {
	dir := t.TempDir()
	r := openLeases(t, dir)
	largest := 0
	for i := 0; i < 3000; i++ {
		name := fmt.Sprintf("jobs/%06d", i)
		require.NoError(t, r.Admit(name, time.Minute))
		r.Done(name, time.Minute)
		largest = max(largest, len(readRecord(t, dir)))
	}
	// 3,000 lines of about 25 bytes were written; the record never held
	// much more than the compaction slack.
	assert.Less(t, largest, compactSlack+4096)
	require.Eventually(t, func() bool {
		_, byName := recordWaits(t, dir)
		return len(byName) == 0
	}, 5*time.Second, testLazy)
	r.Close()
	next := openLeases(t, dir)
	assert.Equal(t, "monolock lease record v1\nall 0\n", readRecord(t, dir), "rewritten at the restart")
	next.Close()
}

func recordWaits(t *testing.T, dir string) (time.Duration, map[string]time.Duration) {
	t.Helper()
	all, byName, _, found, err := load(filepath.Join(dir, FileName), time.Now())
	require.NoError(t, err)
	require.True(t, found)
	return all, byName
}

// A write that a crash cut short was never acknowledged: its torn line is
// ignored, and the rewrite at the next start drops it.
func TestLeaseRecordIgnoresATornLastLine(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	require.NoError(t, os.WriteFile(path, []byte(header+"all 200\nlock 30000 \"x\"\nlock 9000"), 0o600))
	r := openLeases(t, dir)
	all, locks := r.Inherited()
	assert.WithinDuration(t, time.Now().Add(200*time.Millisecond), all, 150*time.Millisecond)
	assert.Equal(t, []string{"x"}, keysT(locks))
	assert.NotContains(t, readRecord(t, dir), "9000")
}

func keysT(m map[string]time.Time) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestLeaseRecordRefusesAGarbledFile(t *testing.T) {
	for _, content := range []string{
		"12ab\n",
		header + "all 12ab\n",
		header + "lock 100 unquoted\n",
		header + "lock -5 \"x\"\n",
		header + "wait 100\n",
		header + "permit 100 0 \"x\"\n",
		header + "permit 100 2 x\n",
		header + "permit 0 2 \"x\"\n",
		header + "permit 100 2 \"x\"\npermit 100 3 \"x\"\n",
	} {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, FileName), []byte(content), 0o600))
		_, err := Open(dir, Options{})
		require.Error(t, err, "%q", content)
		assert.Contains(t, err.Error(), "once no client of this server can still count on a lock, replace it with an empty record: printf 'monolock lease record v1\\n' > ")
	}
}

// A server writes its record at every start, so a used data directory
// without one has lost it (a cleanup job, a link to nothing, a wrong
// file): the server refuses to start rather than grant at once a lock
// that a client of the run before the crash may still count on.
func TestLeaseRecordRefusesAMissingFileInAUsedDir(t *testing.T) {
	dir := t.TempDir()
	_, err := Open(dir, Options{})
	require.ErrorContains(t, err, "the lease record "+filepath.Join(dir, FileName)+" is missing (or a link to nothing) in a data directory that a server has used: refusing to start")
	assert.ErrorContains(t, err, "printf 'monolock lease record v1\\n' > "+filepath.Join(dir, FileName))

	require.NoError(t, os.Symlink(filepath.Join(dir, "nowhere"), filepath.Join(dir, FileName)))
	_, err = Open(dir, Options{})
	assert.ErrorContains(t, err, "is missing (or a link to nothing)")

	unreadable := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(unreadable, FileName), 0o700))
	_, err = Open(unreadable, Options{})
	assert.ErrorContains(t, err, "cannot read the lease record")
	assert.ErrorContains(t, err, "refusing to start without it")

	// What the message says to do works.
	fixed := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(fixed, FileName), []byte(header), 0o600))
	r, err := Open(fixed, Options{})
	require.NoError(t, err)
	r.Close()
	// And a new directory needs none.
	r, err = Open(t.TempDir(), Options{FreshDir: true})
	require.NoError(t, err)
	r.Close()
}

// The max-lease-ms of earlier versions is waited out by every lock, and
// replaced.
func TestLeaseRecordReadsTheOldMaxLease(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, legacyFileName), []byte("1500\n"), 0o600))
	r := openLeases(t, dir)
	all, _ := r.Inherited()
	assert.WithinDuration(t, time.Now().Add(1500*time.Millisecond), all, 200*time.Millisecond)
	_, err := os.Stat(filepath.Join(dir, legacyFileName))
	assert.True(t, os.IsNotExist(err), "replaced by %s", FileName)
	assert.Contains(t, readRecord(t, dir), "all 1500\n")

	require.NoError(t, os.WriteFile(filepath.Join(dir, legacyFileName), []byte("soon\n"), 0o600))
	r.Close()
	_, err = Open(dir, Options{})
	assert.ErrorContains(t, err, "soon")
}

func TestLeaseRecordWriteFailureAdmitsNothing(t *testing.T) {
	// A file where the directory was: no user, root included, can write
	// into it (a read-only mode would not stop root).
	dir := filepath.Join(t.TempDir(), "gone")
	require.NoError(t, os.Mkdir(dir, 0o700))
	r := openLeases(t, dir)
	require.NoError(t, os.RemoveAll(dir))
	require.NoError(t, os.WriteFile(dir, nil, 0o600))
	// An append to the removed file would still succeed; a full disk
	// fails the write, and so does the rewrite that meets the file.
	r.mu.Lock()
	r.rewrite = true
	r.mu.Unlock()
	assert.NoError(t, r.Failure(), "nothing written yet")
	assert.Error(t, r.Admit("x", time.Second))
	assert.Error(t, r.Failure(), "the failed write is told until one succeeds")
	assert.Error(t, r.Admit("x", time.Second), "a lease that was not recorded does not count as recorded")
	assert.Error(t, r.Admit("y", time.Minute))
	assert.Error(t, r.Admit("y", time.Minute))

	// The disk is back: the next claims are recorded.
	require.NoError(t, os.Remove(dir))
	require.NoError(t, os.Mkdir(dir, 0o700))
	require.NoError(t, r.Admit("x", time.Second))
	require.NoError(t, r.Admit("y", time.Minute))
	assert.NoError(t, r.Failure())
	wait, byName := inherited(t, r, dir)
	assert.Greater(t, wait, 500*time.Millisecond)
	assert.Greater(t, byName["y"], 50*time.Second)
}

// The grid: exact up to 16 ms, then at most four significant bits, never
// shorter and at most 12.5% longer than the lease.
func TestCoarsenRoundsUpToFourSignificantBits(t *testing.T) {
	ms := time.Millisecond
	for lease, want := range map[time.Duration]time.Duration{
		time.Microsecond: ms, 15 * ms: 15 * ms, 17 * ms: 18 * ms, 1000 * ms: 1024 * ms,
		1500 * ms: 1536 * ms, 10 * time.Second: 10240 * ms, time.Minute: 61440 * ms,
		4294967295 * ms: 4294967296 * ms,
	} {
		assert.Equal(t, want, coarsen(lease), "%v", lease)
	}
	for l := time.Millisecond; l < 50*24*time.Hour; l = l*9/8 + 7*time.Millisecond {
		c := coarsen(l)
		assert.GreaterOrEqual(t, c, l)
		assert.LessOrEqual(t, float64(c), float64(l)*1.125+float64(time.Millisecond))
	}
}

// countingStore counts the writes of a file record, and can hold one back
// until released.
type countingStore struct {
	Store
	writes  atomic.Int64
	hold    atomic.Bool   // a write waits for release
	release chan struct{} // closed: held writes go on
}

func newCountingStore(dir string) *countingStore {
	return &countingStore{Store: &fileStore{dir: dir, path: filepath.Join(dir, FileName), fresh: true}, release: make(chan struct{})}
}

func (c *countingStore) Write(ch Change) error {
	c.writes.Add(1)
	if c.hold.Load() {
		<-c.release
	}
	return c.Store.Write(ch)
}

// A stream of ever-longer leases (here one millisecond longer each time,
// from 1 ms to 40 s, for the bound of every lock and for one name) costs
// a handful of writes per doubling of the lease, not one per claim.
func TestEverLongerLeasesCoalesce(t *testing.T) {
	dir := t.TempDir()
	store := newCountingStore(dir)
	r, err := OpenStore(store, Options{LazyWrite: time.Hour})
	require.NoError(t, err)
	defer r.Close()
	claims := 0
	for lease := time.Millisecond; lease <= 40*time.Second; lease += 3 * time.Millisecond {
		name := "all"
		if lease > DefaultNamedLease {
			name = "named"
		}
		require.NoError(t, r.Admit(name, lease))
		claims++
	}
	// 8 steps per doubling: 1 ms to 10 s is about 13 doublings, 10 s to
	// 40 s two more; the first write is Open's.
	assert.LessOrEqual(t, store.writes.Load(), int64(8*16+1), "%d claims", claims)
	assert.Greater(t, claims, 10000)
	_, byName := inherited(t, r, dir)
	assert.GreaterOrEqual(t, byName["named"], 39*time.Second)
}

// While a write is under way, a claim whose lease the record already
// covers is admitted at once: a stream of longer leases never holds up
// shorter ones.
func TestCoveredLeasesDoNotWaitForAWriteUnderWay(t *testing.T) {
	dir := t.TempDir()
	store := newCountingStore(dir)
	r, err := OpenStore(store, Options{})
	require.NoError(t, err)
	require.NoError(t, r.Admit("a", 2*time.Second))
	require.NoError(t, r.Admit("long", time.Minute))
	store.hold.Store(true)
	longer := make(chan error, 2)
	go func() { longer <- r.Admit("a", 5*time.Second) }()
	go func() { longer <- r.Admit("long", 10*time.Minute) }()
	require.Eventually(t, func() bool { return store.writes.Load() >= 4 }, 5*time.Second, time.Millisecond,
		"the longer leases' write is under way")
	require.NoError(t, r.Admit("b", 2*time.Second), "covered by the bound: no write")
	require.NoError(t, r.Admit("long", time.Minute), "covered by the name's statement: no write")
	select {
	case err := <-longer:
		t.Fatalf("a longer lease was admitted before its write ended: %v", err)
	default:
	}
	close(store.release)
	require.NoError(t, <-longer)
	require.NoError(t, <-longer)
	r.Close()
}

// A clean stop states a shared lock's held-back permits apart, each with
// its own wait, when nothing else holds the name back; the next run
// inherits them as permits, not as a wait of the whole name. A name with
// a hold of its own, or a later "lock" line, stays whole.
func TestLeaseRecordKeepsHeldBackPermitsAcrossACleanStop(t *testing.T) {
	dir := t.TempDir()
	r := openLeases(t, dir)
	now := time.Now()
	r.HoldPermit("pool", now.Add(20*time.Second), 3)
	r.HoldPermit("pool", now.Add(30*time.Second), 3)
	r.HoldPermit("mixed", now.Add(20*time.Second), 2)
	r.Hold("mixed", now.Add(25*time.Second))
	require.NoError(t, r.Drained())
	text := readRecord(t, dir)
	assert.Contains(t, text, "\"pool\"\n")
	assert.Equal(t, 2, strings.Count(text, "permit "), text)
	assert.Contains(t, text, "lock ")

	next := openLeases(t, dir)
	_, locks := next.Inherited()
	assert.Contains(t, locks, "mixed")
	assert.NotContains(t, locks, "pool")
	permits := next.InheritedPermits()
	require.Contains(t, permits, "pool")
	assert.Equal(t, uint16(3), permits["pool"].Limit)
	require.Len(t, permits["pool"].Until, 2)
	for i, want := range []time.Duration{20 * time.Second, 30 * time.Second} {
		assert.WithinDuration(t, now.Add(want), permits["pool"].Until[i], time.Second)
	}
	// Until this run stops cleanly, a crash holds the whole name back.
	assert.Contains(t, readRecord(t, dir), "lock ")
	next.Close()

	// A later whole-name line replaces the permits.
	require.NoError(t, os.WriteFile(filepath.Join(dir, FileName),
		[]byte(header+"permit 5000 2 \"p\"\nlock 7000 \"p\"\n"), 0o600))
	last := openLeases(t, dir)
	_, locks = last.Inherited()
	assert.Contains(t, locks, "p")
	assert.Empty(t, last.InheritedPermits())
}
