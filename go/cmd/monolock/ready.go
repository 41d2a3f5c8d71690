package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/monolock/monolock/go/internal/configfile"
	"github.com/monolock/monolock/go/internal/readyfile"
)

// readyInfo is the object --ready-file holds while the server listens
// (docs/operating.md, "The ready file"). Tests and tools read the bound
// addresses from it instead of parsing the log.
type readyInfo = readyfile.Info

// checkReadyPath is for setUp: a ready file whose directory is missing
// would only fail once the server listens. The directory must be writable
// by this user only: in one that others may write to (/tmp), another user
// could plant a false ready file that sends tools to another server, or a
// file of theirs that the server cannot replace (a sticky directory). And
// what is at the path must be an earlier ready file, or nothing: the
// server never deletes a file it did not write.
func checkReadyPath(path string) error {
	if path == "" {
		return nil
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if err != nil {
		return badUsage("--ready-file %s: %v", path, err)
	}
	if !st.IsDir() {
		return badUsage("--ready-file %s: %s is not a directory", path, dir)
	}
	if writableByOthers(st) {
		return badUsage("--ready-file %s: %s is writable by other users, who could plant a false ready file there: "+
			"use a directory that only this server's user can write (systemd: RuntimeDirectory=)", path, dir)
	}
	if st, err := os.Lstat(path); err == nil && st.IsDir() {
		return badUsage("--ready-file %s is a directory", path)
	}
	if _, _, err := readReadyFile(path); err != nil {
		return badUsage("--ready-file %s: %v", path, err)
	}
	return nil
}

// readReadyFile reads the ready file at path, if there is one. A path that
// holds something else (a directory, a FIFO, a link, a file that is no
// ready file) is an error: the server neither reads through it (a FIFO
// would block) nor replaces it.
func readReadyFile(path string) (info readyInfo, found bool, err error) {
	f, err := openReadyFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return readyInfo{}, false, nil
	}
	if err != nil {
		return readyInfo{}, false, fmt.Errorf("something that is not a ready file is there (%v); remove it, or give another path", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return readyInfo{}, false, err
	}
	if !st.Mode().IsRegular() {
		return readyInfo{}, false, fmt.Errorf("a %s, not a ready file, is there; remove it, or give another path", configfile.Kind(st.Mode()))
	}
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return readyInfo{}, false, err
	}
	if json.Unmarshal(b, &info) != nil || info.LockAddr == "" || info.PID <= 0 {
		return readyInfo{}, false, errors.New("a file that is not a ready file is there; the server does not replace what it did not write: remove it, or give another path")
	}
	return info, true, nil
}

// clearReadyFile removes a ready file left by an earlier server (one that
// was killed), so that nobody takes it for this one's before it listens.
func clearReadyFile(path string) error {
	if _, found, err := readReadyFile(path); err != nil || !found {
		return err // checkReadyPath has told of anything else
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("--ready-file: %w", err)
	}
	return nil
}

// writeReadyFile writes info to path atomically: a temporary file in the
// same directory, renamed over path, so a reader sees no file or all of it.
func writeReadyFile(path string, info readyInfo) error {
	b, err := json.Marshal(info)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("--ready-file: %w", err)
	}
	_, err = tmp.Write(append(b, '\n'))
	if err == nil {
		err = tmp.Chmod(0o644) // addresses only: readable by tools of other users
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("--ready-file: %w", err)
	}
	return nil
}

// removeReadyFile removes path on the way out, unless another server has
// since written its own there.
func removeReadyFile(path string, pid int) {
	if info, found, err := readReadyFile(path); err == nil && found && info.PID == pid {
		_ = os.Remove(path)
	}
}
