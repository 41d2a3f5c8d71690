package main

import (
	"github.com/monolock/monolock/go/internal/leaserecord"
	"github.com/monolock/monolock/go/internal/tokenstore"
)

// checkDataDir finds what a start would find wrong with the state in the
// data directory (a lost token mark or lease record, a garbled one)
// without writing or locking anything, so that --check-config runs beside
// the server that uses the directory and says what that server's next
// start would say.
func checkDataDir(dir string, tokenFloor uint64) error {
	fresh, err := tokenstore.Check(dir, tokenFloor)
	if err != nil {
		return err
	}
	return leaserecord.CheckFile(dir, fresh)
}
