//go:build !unix

package runcmd

import (
	"fmt"
	"io"
)

// Main reports that monolock run needs process groups, which this system
// does not have.
func Main(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "monolock run: not supported on this system (needs Unix process groups)")
	return 125
}

// MainElect reports the same for monolock elect.
func MainElect(args []string, stdout, stderr io.Writer) int { return Main(args, stdout, stderr) }
