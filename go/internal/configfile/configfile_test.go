//go:build unix

package configfile

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadTakesRegularFilesOnly(t *testing.T) {
	dir := t.TempDir()
	ok := filepath.Join(dir, "acl")
	require.NoError(t, os.WriteFile(ok, []byte("allow * *\n"), 0o600))
	b, err := Read(ok, 100)
	require.NoError(t, err)
	assert.Equal(t, "allow * *\n", string(b))

	_, err = Read(ok, 5)
	assert.ErrorContains(t, err, "is larger than 5 bytes")

	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	_, err = Read(fifo, 100) // returns at once: nothing writes to it
	assert.ErrorContains(t, err, "is a FIFO, not a regular file")

	_, err = Read("/dev/zero", 100)
	assert.ErrorContains(t, err, "is a device, not a regular file")

	_, err = Read(dir, 100)
	assert.ErrorContains(t, err, "is a directory, not a regular file")

	_, err = Read(filepath.Join(dir, "missing"), 100)
	assert.ErrorIs(t, err, os.ErrNotExist)
}
