//go:build !unix

package main

import (
	"fmt"
	"os"
)

// openReadyFile opens path for reading if it is a regular file.
func openReadyFile(path string) (*os.File, error) {
	st, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("a %v", st.Mode().Type())
	}
	return os.Open(path)
}

// writableByOthers cannot be told from the mode bits here.
func writableByOthers(os.FileInfo) bool { return false }
