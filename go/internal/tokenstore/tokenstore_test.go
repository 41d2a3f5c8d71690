package tokenstore

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func markFile(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, FileName))
	require.NoError(t, err)
	return string(b)
}

// next takes a token, waiting (briefly) while the background reservation
// catches up, as the server's waiters do.
func next(t *testing.T, s *Store) (uint64, error) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		tok, err := s.Next()
		var unavailable *UnavailableError
		if !errors.As(err, &unavailable) || time.Now().After(deadline) {
			return tok, err
		}
		time.Sleep(time.Millisecond)
	}
}

func TestFreshStoreStartsAtOneAndCountsUp(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nested", "data")
	s, err := Open(dir, Options{BlockSize: 3})
	require.NoError(t, err)
	defer s.Close()
	for want := uint64(1); want <= 10; want++ {
		got, err := next(t, s)
		require.NoError(t, err)
		assert.Equal(t, want, got)
		// The durable mark always covers every token handed out.
		assert.GreaterOrEqual(t, s.Mark(), got)
	}
	assert.Equal(t, uint64(12), s.Mark(), "blocks of 3: 3, 6, 9, 12")
	assert.Equal(t, fileHeader+"12\n", markFile(t, dir))
	info, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), info.Mode().Perm())
}

func TestMarkReservedBeforeFirstTokenOfBlock(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{BlockSize: 6})
	require.NoError(t, err)
	defer s.Close()
	// Opening reserves the first block before any token is issued.
	assert.Equal(t, fileHeader+"6\n", markFile(t, dir))
	for want := uint64(1); want <= 20; want++ {
		tok, err := next(t, s)
		require.NoError(t, err)
		require.Equal(t, want, tok)
		// Every token handed out is covered by the mark on disk.
		mark, found, err := readMark(filepath.Join(dir, FileName))
		require.NoError(t, err)
		require.True(t, found)
		require.GreaterOrEqual(t, mark, tok)
	}
}

// Half a block in, the next block is reserved in the background, so a
// grant does not wait for the disk at the block boundary.
func TestNextBlockIsReservedAhead(t *testing.T) {
	ready := make(chan struct{}, 10)
	s, err := Open(t.TempDir(), Options{BlockSize: 10, OnReady: func() { ready <- struct{}{} }})
	require.NoError(t, err)
	defer s.Close()
	for i := 0; i < 6; i++ { // tokens 1..6: past half of the block 1..10
		_, err := s.Next()
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return s.Mark() == 20 }, 5*time.Second, time.Millisecond)
	for want := uint64(7); want <= 15; want++ {
		tok, err := s.Next()
		require.NoError(t, err, "token %d had to wait for the disk", want)
		require.Equal(t, want, tok)
	}
	assert.Empty(t, ready, "OnReady is only for a store that ran dry")
}

// A crash in the middle of a block: the process dies after handing out part
// of a reserved block. Close writes nothing, so closing without any further
// step leaves exactly what a crash leaves.
func TestCrashMidBlockRestartsAboveEveryIssuedToken(t *testing.T) {
	dir := t.TempDir()
	var last uint64
	for run := 0; run < 3; run++ {
		s, err := Open(dir, Options{BlockSize: 100})
		require.NoError(t, err)
		for i := 0; i < 42; i++ {
			tok, err := next(t, s)
			require.NoError(t, err)
			require.Greater(t, tok, last, "run %d", run)
			last = tok
		}
		require.NoError(t, s.Close()) // "crash": nothing more is written
	}
	assert.Equal(t, uint64(242), last, "each run starts right above the previous block")
}

func TestLeftoverTempFileIsIgnored(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{BlockSize: 10})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	// A crash between writing the temp file and the rename leaves it behind.
	require.NoError(t, os.WriteFile(filepath.Join(dir, FileName+".tmp"), []byte("garbage"), 0o600))
	s, err = Open(dir, Options{BlockSize: 10})
	require.NoError(t, err)
	defer s.Close()
	tok, err := next(t, s)
	require.NoError(t, err)
	assert.Equal(t, uint64(11), tok)
}

func TestCorruptMarkFileIsAClearError(t *testing.T) {
	for name, content := range map[string]string{
		"empty":          "",
		"no header":      "123\n",
		"not a number":   fileHeader + "12a\n",
		"truncated":      fileHeader + "12",
		"negative":       fileHeader + "-5\n",
		"too large":      fileHeader + "18446744073709551616\n",
		"trailing bytes": fileHeader + "12\nxx",
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, FileName), []byte(content), 0o600))
			s, err := Open(dir, Options{})
			require.Error(t, err)
			assert.Nil(t, s)
			assert.Contains(t, err.Error(), "corrupt high-water mark file")
			assert.Contains(t, err.Error(), filepath.Join(dir, FileName))
			// The lock was released: fixing the file makes the store usable.
			require.NoError(t, os.WriteFile(filepath.Join(dir, FileName), []byte(fileHeader+"7\n"), 0o600))
			s, err = Open(dir, Options{})
			require.NoError(t, err)
			defer s.Close()
			tok, err := next(t, s)
			require.NoError(t, err)
			assert.Equal(t, uint64(8), tok)
		})
	}
}

func TestUnreadableDataDirIsAnError(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	_, err := Open(filepath.Join(file, "sub"), Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "create data directory")
	_, err = Open("", Options{})
	require.Error(t, err)
}

func TestSecondStoreOnSameDirectoryIsRefused(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	require.NoError(t, err)
	_, err = Open(dir, Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "in use by another server")
	require.NoError(t, s.Close())
	s, err = Open(dir, Options{})
	require.NoError(t, err)
	require.NoError(t, s.Close())
}

func TestClosedStoreRefusesTokens(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "idempotent")
	_, err = next(t, s)
	require.Error(t, err)
}

func TestTokenSpaceEndsWithoutWrapping(t *testing.T) {
	dir := t.TempDir()
	start := uint64(math.MaxUint64 - 4)
	require.NoError(t, os.WriteFile(filepath.Join(dir, FileName),
		[]byte(fileHeader+strconv.FormatUint(start, 10)+"\n"), 0o600))
	s, err := Open(dir, Options{BlockSize: 3})
	require.NoError(t, err)
	defer s.Close()
	for want := start + 1; ; want++ {
		tok, err := next(t, s)
		require.NoError(t, err)
		require.Equal(t, want, tok)
		if want == math.MaxUint64 {
			break
		}
	}
	_, err = next(t, s)
	require.ErrorIs(t, err, ErrExhausted)
	require.NoError(t, s.Close())

	_, err = Open(dir, Options{})
	require.ErrorIs(t, err, ErrExhausted, "a full mark file stays exhausted")
}

// A cleanup job deletes the mark of a used directory: the store refuses to
// start (tokens would restart at 1) and says what to do; --token-floor is
// the explicit way back, and tokens then continue above the floor.
func TestDeletedMarkRefusesToStart(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{BlockSize: 10})
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		_, err := next(t, s)
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())
	require.NoError(t, os.Remove(filepath.Join(dir, FileName)))

	_, err = Open(dir, Options{BlockSize: 10})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "has been used")
	assert.Contains(t, err.Error(), "--token-floor")

	s, err = Open(dir, Options{BlockSize: 10, Floor: 500})
	require.NoError(t, err)
	defer s.Close()
	tok, err := next(t, s)
	require.NoError(t, err)
	assert.Equal(t, uint64(501), tok)
}

// The floor only ever raises: a mark above it wins.
func TestFloorBelowTheMarkChangesNothing(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, FileName), []byte(fileHeader+"900\n"), 0o600))
	s, err := Open(dir, Options{Floor: 10})
	require.NoError(t, err)
	defer s.Close()
	tok, err := next(t, s)
	require.NoError(t, err)
	assert.Equal(t, uint64(901), tok)
}

// A directory written by a version without the marker (a mark, no marker)
// is taken as used from now on.
func TestMarkerIsAddedToAnOlderDirectory(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, FileName), []byte(fileHeader+"7\n"), 0o600))
	s, err := Open(dir, Options{})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	_, err = os.Stat(filepath.Join(dir, markerFileName))
	require.NoError(t, err)
	require.NoError(t, os.Remove(filepath.Join(dir, FileName)))
	_, err = Open(dir, Options{})
	require.ErrorContains(t, err, "has been used")
}

// A reservation that cannot be written makes Next refuse (temporarily, with
// the cause) instead of blocking, is retried once per interval, and OnReady
// says when tokens are back.
func TestFailedReservationIsRetriedOnACadence(t *testing.T) {
	dir := t.TempDir()
	ready := make(chan struct{}, 1)
	var failures atomic.Int32
	s, err := Open(dir, Options{BlockSize: 2, RetryEvery: 40 * time.Millisecond,
		OnReady: func() { ready <- struct{}{} }, OnFailure: func(error) { failures.Add(1) }})
	require.NoError(t, err)
	defer s.Close()
	// A directory where the temporary file goes makes every write fail.
	require.NoError(t, os.Mkdir(filepath.Join(dir, FileName+".tmp"), 0o700))
	for want := uint64(1); want <= 2; want++ {
		tok, err := s.Next()
		require.NoError(t, err)
		require.Equal(t, want, tok)
	}
	start := time.Now()
	var unavailable *UnavailableError
	for i := 0; i < 10000; i++ { // callers hammering a failing store
		_, err := s.Next()
		require.ErrorAs(t, err, &unavailable)
	}
	time.Sleep(200 * time.Millisecond)
	require.Error(t, s.Failure())
	most := int32(time.Since(start)/(40*time.Millisecond)) + 2
	assert.LessOrEqual(t, failures.Load(), most, "one write per interval, not one per caller")

	require.NoError(t, os.Remove(filepath.Join(dir, FileName+".tmp")))
	select {
	case <-ready:
	case <-time.After(5 * time.Second):
		t.Fatal("OnReady not called after the disk recovered")
	}
	require.NoError(t, s.Failure())
	tok, err := s.Next()
	require.NoError(t, err)
	assert.Equal(t, uint64(3), tok)
}

// gatedPersist is a persist function whose writes block until the test
// lets each one through, so a test decides how long a reservation takes.
type gatedPersist struct {
	started chan uint64   // the top of every write, as it begins
	release chan struct{} // one receive per write that may finish
}

func newGatedPersist() *gatedPersist {
	return &gatedPersist{started: make(chan uint64, 100), release: make(chan struct{}, 100)}
}

func (g *gatedPersist) persist(top uint64) error {
	g.started <- top
	<-g.release
	return nil
}

// A store that runs out while its next block is being written waits for
// that write instead of refusing the grant: a free lock is granted, late
// by the write, never answered WAITING.
func TestNextWaitsForTheReservationUnderWay(t *testing.T) {
	g := newGatedPersist()
	g.release <- struct{}{} // the first block, written by New
	s, err := New(0, g.persist, Options{BlockSize: 4, StarveWait: time.Minute})
	require.NoError(t, err)
	require.Equal(t, uint64(4), <-g.started)
	for want := uint64(1); want <= 4; want++ { // token 3 starts the next write
		tok, err := s.Next()
		require.NoError(t, err)
		require.Equal(t, want, tok)
	}
	require.Equal(t, uint64(8), <-g.started)
	got := make(chan error, 1)
	go func() {
		tok, err := s.Next()
		if err == nil && tok != 5 {
			err = fmt.Errorf("token %d, want 5", tok)
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("Next returned before the write finished: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	g.release <- struct{}{}
	require.NoError(t, <-got)
}

// A write slower than StarveWait is a store that cannot keep up: Next
// gives up on it (the claim queues), and later calls do not wait again.
func TestNextGivesUpOnAWriteSlowerThanStarveWait(t *testing.T) {
	g := newGatedPersist()
	g.release <- struct{}{}
	const starveWait = 300 * time.Millisecond
	s, err := New(0, g.persist, Options{BlockSize: 2, StarveWait: starveWait})
	require.NoError(t, err)
	<-g.started
	for range 2 {
		_, err := s.Next()
		require.NoError(t, err)
	}
	<-g.started // the second block's write, held
	_, err = s.Next()
	var unavailable *UnavailableError
	require.ErrorAs(t, err, &unavailable)
	start := time.Now()
	_, err = s.Next()
	require.ErrorAs(t, err, &unavailable)
	assert.Less(t, time.Since(start), starveWait/2, "a second call waited again for the same write")
	g.release <- struct{}{}
	require.Eventually(t, func() bool { _, err := s.Next(); return err == nil }, 5*time.Second, time.Millisecond)
	close(g.release) // let every later write through
	require.NoError(t, s.Close())
}

// Blocks grow when the grants outrun the writes, so that the reservation
// keeps ahead of the rate; they stay as they are when the writes keep up.
func TestBlocksGrowWhenGrantsOutrunTheWrites(t *testing.T) {
	g := newGatedPersist()
	g.release <- struct{}{}
	s, err := New(0, g.persist, Options{BlockSize: 10, StarveWait: time.Minute})
	require.NoError(t, err)
	require.Equal(t, uint64(10), <-g.started)
	take := func(n int) {
		for range n {
			_, err := s.Next()
			require.NoError(t, err)
		}
	}
	take(6) // past half: the write of 11..20 begins with 5 tokens left
	require.Equal(t, uint64(20), <-g.started)
	take(4) // 4 of the 5 used while it is written: more than half
	g.release <- struct{}{}
	require.Eventually(t, func() bool { return s.Mark() == 20 }, 5*time.Second, time.Millisecond)
	take(1) // token 11: 9 left, under half of the grown block of 20
	assert.Equal(t, uint64(40), <-g.started, "the next block is twice as large")
	g.release <- struct{}{}
	require.Eventually(t, func() bool { return s.Mark() == 40 }, 5*time.Second, time.Millisecond)
	take(20) // tokens 12..31: 9 left at 31, under half of 20
	assert.Equal(t, uint64(60), <-g.started, "a write that kept up leaves the block as it was")
	close(g.release)
	require.NoError(t, s.Close())
}
