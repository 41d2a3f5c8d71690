package main

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// readyProc is a monolock serve started with --ready-file.
type readyProc struct {
	cmd    *exec.Cmd
	stderr *strings.Builder // read it only once exited is closed
	exited chan struct{}
	info   readyInfo // the first content of the ready file of this process
}

// startWithReadyFile starts monolock serve with --ready-file path and
// returns once that file names this process.
// It reads the file as fast as it can meanwhile: every read must be a
// whole object (the server renames a complete file into place), and an
// object of another process (a stale file) does not count.
func startWithReadyFile(t *testing.T, path string, args ...string) *readyProc {
	t.Helper()
	args = append([]string{"serve", "--data-dir", t.TempDir(), "--ready-file", path}, args...)
	cmd := exec.Command(binary, args...)
	cmd.Env = cleanEnv()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	deadline := time.Now().Add(wait)
	for reads := 0; ; reads++ {
		b, err := os.ReadFile(path)
		if err == nil {
			var info readyInfo
			require.NoError(t, json.Unmarshal(b, &info), "read %d saw a partial file: %q", reads, b)
			if info.PID == cmd.Process.Pid {
				return &readyProc{cmd, &stderr, exited, info}
			}
		} else {
			require.ErrorIs(t, err, os.ErrNotExist)
		}
		select {
		case <-exited:
			t.Fatalf("monolock serve exited before its ready file: %s", stderr.String())
		default:
		}
		require.True(t, time.Now().Before(deadline), "no ready file within %v", wait)
	}
}

// The ready file names the ports the server really bound (both :0), its
// pid and version, appears only whole, and is gone after a clean stop.
func TestReadyFileHasBoundAddressesAndGoesOnExit(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ready.json")
	p := startWithReadyFile(t, path, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0")
	info := p.info

	assert.Equal(t, version, info.Version)
	assert.NotRegexp(t, `:0$`, info.LockAddr, "the bound port, not the flag's")
	assert.NotRegexp(t, `:0$`, info.AdminAddr)

	c := rawDial(t, info.LockAddr)
	c.acquire(t, "ready")
	assert.Equal(t, protocol.MsgAcquired, c.readType(t), "lock_addr is this server's lock port")
	resp, err := http.Get("http://" + info.AdminAddr + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "admin_addr is this server's admin API")

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file is left beside the ready file")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	c.conn.Close()
	select {
	case <-p.exited:
	case <-time.After(wait):
		t.Fatal("monolock serve did not stop on SIGTERM")
	}
	assert.Equal(t, 0, p.cmd.ProcessState.ExitCode())
	_, err = os.Stat(path)
	assert.ErrorIs(t, err, os.ErrNotExist, "the ready file goes with a clean stop")
	log := p.stderr.String()
	assert.Contains(t, log, "msg=listening addr="+info.LockAddr+"\n", "the file agrees with the log")
	assert.Contains(t, log, `msg="admin listening" addr=`+info.AdminAddr+" ")
}

// A file left at the path (a killed server's) is replaced, and admin_addr
// is "" with the admin API off.
func TestReadyFileReplacesAStaleOne(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ready.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"lock_addr":"127.0.0.1:1","admin_addr":"","pid":1,"version":"old"}`), 0o644))
	info := startWithReadyFile(t, path, "--listen", "127.0.0.1:0", "--admin", "off").info
	assert.Equal(t, "", info.AdminAddr, "admin API off")
	assert.NotEqual(t, "127.0.0.1:1", info.LockAddr)
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), st.Mode().Perm())
}

// The server never deletes or reads through what it did not write: a file
// that is no ready file, or a FIFO, at the path refuses the start with
// status 2 and is left as it was; a directory that other users may write
// to (where one could plant a false ready file) is refused too.
func TestReadyFileRefusesWhatItDidNotWrite(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(other, []byte("my notes\n"), 0o644))
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	shared := filepath.Join(t.TempDir(), "shared")
	require.NoError(t, os.Mkdir(shared, 0o755))
	require.NoError(t, os.Chmod(shared, 0o1777)) // as /tmp

	for _, c := range []struct{ path, want string }{
		{other, "a file that is not a ready file is there; the server does not replace what it did not write"},
		{fifo, "not a ready file, is there"},
		{filepath.Join(shared, "ready.json"), "is writable by other users, who could plant a false ready file there"},
	} {
		code, _, stderr := command(t, nil, "serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--admin", "off", "--ready-file", c.path)
		assert.Equal(t, 2, code, "%s: %s", c.path, stderr)
		assert.Contains(t, stderr, c.want)
	}
	b, err := os.ReadFile(other)
	require.NoError(t, err)
	assert.Equal(t, "my notes\n", string(b), "the unrelated file is kept")
}

// A ready file swapped for a FIFO while the server runs does not hang its
// exit (it is not read), and is left there.
func TestReadyFileSwappedForAFIFODoesNotHangTheExit(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ready.json")
	p := startWithReadyFile(t, path, "--listen", "127.0.0.1:0", "--admin", "off")
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	require.NoError(t, os.Rename(fifo, path))
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.exited:
	case <-time.After(wait):
		t.Fatal("the server's exit hung on the FIFO")
	}
	st, err := os.Lstat(path)
	require.NoError(t, err)
	assert.Equal(t, os.ModeNamedPipe, st.Mode().Type())
}
