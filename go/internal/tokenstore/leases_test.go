package tokenstore

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLeaseRecordOnlyGrowsAndSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	r, err := OpenLeaseRecord(dir)
	require.NoError(t, err)
	assert.Zero(t, r.Longest(), "a new directory has acknowledged nothing")

	require.NoError(t, r.Admit(1500*time.Millisecond))
	require.NoError(t, r.Admit(time.Second), "a shorter lease needs no write")
	assert.Equal(t, 1500*time.Millisecond, r.Longest())
	b, err := os.ReadFile(filepath.Join(dir, LeaseFileName))
	require.NoError(t, err)
	assert.Equal(t, "1500\n", string(b))

	// A fraction of a millisecond rounds up: the wait may only be longer.
	require.NoError(t, r.Admit(2*time.Second+time.Microsecond))
	again, err := OpenLeaseRecord(dir)
	require.NoError(t, err)
	assert.Equal(t, 2001*time.Millisecond, again.Longest())
}

func TestLeaseRecordRefusesAGarbledFile(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, LeaseFileName), []byte("12ab\n"), 0o600))
	_, err := OpenLeaseRecord(dir)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "12ab")
}

func TestLeaseRecordWriteFailureKeepsTheOldValue(t *testing.T) {
	// A file where the directory was: no user, root included, can write
	// into it (a read-only mode would not stop root).
	dir := filepath.Join(t.TempDir(), "gone")
	require.NoError(t, os.Mkdir(dir, 0o700))
	r, err := OpenLeaseRecord(dir)
	require.NoError(t, err)
	require.NoError(t, os.Remove(dir))
	require.NoError(t, os.WriteFile(dir, nil, 0o600))
	assert.Error(t, r.Admit(time.Second))
	assert.Zero(t, r.Longest(), "a lease that was not recorded must not count as recorded")
}
