//go:build !unix

package tokenstore

import (
	"fmt"
	"os"
)

// lockDir only creates the lock file where flock(2) is not available: two
// servers on one data directory are then the operator's responsibility.
func lockDir(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("tokenstore: open lock file: %w", err)
	}
	return f, nil
}
