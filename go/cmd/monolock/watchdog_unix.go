//go:build unix

package main

import "github.com/monolock/monolock/go/internal/runcmd/watchdog"

// The watchdog that `monolock run` starts between itself and the command:
// the same binary, under a subcommand that usage does not list.
func init() { subcommands[watchdog.Subcommand] = watchdog.Main }
