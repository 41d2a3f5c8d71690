package tokenstore

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func markFile(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, FileName))
	require.NoError(t, err)
	return string(b)
}

func TestFreshStoreStartsAtOneAndCountsUp(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nested", "data")
	s, err := Open(dir, Options{BlockSize: 3})
	require.NoError(t, err)
	defer s.Close()
	for want := uint64(1); want <= 10; want++ {
		got, err := s.Next()
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
	s, err := Open(dir, Options{BlockSize: 5})
	require.NoError(t, err)
	defer s.Close()
	// Opening reserves the first block before any token is issued.
	assert.Equal(t, fileHeader+"5\n", markFile(t, dir))
	for i := 0; i < 5; i++ {
		_, err := s.Next()
		require.NoError(t, err)
	}
	assert.Equal(t, fileHeader+"5\n", markFile(t, dir), "block not used up yet")
	tok, err := s.Next()
	require.NoError(t, err)
	assert.Equal(t, uint64(6), tok)
	assert.Equal(t, fileHeader+"10\n", markFile(t, dir), "written before token 6 is returned")
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
			tok, err := s.Next()
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
	tok, err := s.Next()
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
			tok, err := s.Next()
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
	_, err = s.Next()
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
		tok, err := s.Next()
		require.NoError(t, err)
		require.Equal(t, want, tok)
		if want == math.MaxUint64 {
			break
		}
	}
	_, err = s.Next()
	require.ErrorIs(t, err, ErrExhausted)
	require.NoError(t, s.Close())

	_, err = Open(dir, Options{})
	require.ErrorIs(t, err, ErrExhausted, "a full mark file stays exhausted")
}
