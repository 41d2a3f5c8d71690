package main

import (
	"os"

	"github.com/monolock/monolock/go/internal/runcmd"
)

// runMain is `monolock run`: hold a lock while a command runs. The flags,
// the environment of the command and the exit statuses are described in
// the package runcmd and in `monolock run -h`.
func runMain(args []string) int { return runcmd.Main(args, os.Stdout, os.Stderr) }
