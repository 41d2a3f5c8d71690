//go:build unix

package main

import (
	"os"
	"syscall"
)

// openReadyFile opens path for reading without following a link and
// without blocking on a FIFO.
func openReadyFile(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
}

// writableByOthers reports whether users other than the owner may create
// files in the directory dir.
func writableByOthers(dir os.FileInfo) bool { return dir.Mode().Perm()&0o022 != 0 }
