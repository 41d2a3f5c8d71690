//go:build !unix

package configfile

import "os"

func open(path string) (*os.File, error) { return os.Open(path) }
