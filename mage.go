//go:build ignore

// Zero-install entry point: `go run mage.go <target>` runs the magefile
// without a global mage binary.
package main

import (
	"os"

	"github.com/magefile/mage/mage"
)

func main() { os.Exit(mage.Main()) }
