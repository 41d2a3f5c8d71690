//go:build unix

package configfile

import (
	"os"
	"syscall"
)

// open opens path for reading without blocking on a FIFO that has no
// writer (the check that follows refuses it).
func open(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}
