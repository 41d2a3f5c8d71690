// Package configfile reads the small files that configure the server (the
// ACL, the admin token) the same way for a start, a SIGHUP reload and
// --check-config: only regular files, without blocking on a FIFO or
// reading a device such as /dev/zero forever, and no more than a bound.
package configfile

import (
	"fmt"
	"io"
	"io/fs"
)

// Read returns the content of the regular file at path, at most limit
// bytes; a larger file, or anything that is no regular file, is an error
// that says so.
func Read(path string, limit int64) ([]byte, error) {
	f, err := open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is a %s, not a regular file", path, Kind(st.Mode()))
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return b, nil
}

// Kind names what a path that is no regular file holds: FIFO, socket,
// device, directory or special file.
func Kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	case m.IsDir():
		return "directory"
	}
	return "special file"
}
