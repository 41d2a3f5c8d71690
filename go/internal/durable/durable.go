// Package durable writes files that survive a crash or a power loss: the
// token high-water mark and the lease record are only as good as this.
package durable

import (
	"os"
	"path/filepath"
)

// WriteFile replaces path atomically and durably: write a temporary
// file, fsync it, rename it over the old one, fsync the directory. A crash
// at any point leaves either the old or the new content, never a torn file.
func WriteFile(path string, content []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(content)
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
		err = SyncDir(filepath.Dir(path))
	}
	return err
}

// SyncDir fsyncs a directory, so that the names it holds (a create, a
// rename, a removal) survive a crash.
func SyncDir(dir string) error {
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

// Quote returns the start of a file's content, for an error that says
// what a corrupt file holds without dumping all of it.
func Quote(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}
