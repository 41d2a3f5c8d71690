package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// readyInfo is the object --ready-file holds while the server listens
// (docs/operating.md, "The ready file"). Tests and tools read the bound
// addresses from it instead of parsing the log.
type readyInfo struct {
	LockAddr  string `json:"lock_addr"`  // the bound lock protocol address
	AdminAddr string `json:"admin_addr"` // the bound admin API address; "" when it is not running
	PID       int    `json:"pid"`
	Version   string `json:"version"`
}

// checkReadyPath is for setUp: a ready file whose directory is missing
// would only fail once the server listens.
func checkReadyPath(path string) error {
	if path == "" {
		return nil
	}
	st, err := os.Stat(filepath.Dir(path))
	if err != nil {
		return badUsage("--ready-file %s: %v", path, err)
	}
	if !st.IsDir() {
		return badUsage("--ready-file %s: %s is not a directory", path, filepath.Dir(path))
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return badUsage("--ready-file %s is a directory", path)
	}
	return nil
}

// clearReadyFile removes a ready file left by an earlier server (one that
// was killed), so that nobody takes it for this one's before it listens.
func clearReadyFile(path string) error {
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
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	var info readyInfo
	if json.Unmarshal(b, &info) == nil && info.PID == pid {
		_ = os.Remove(path)
	}
}
