// Command monolock is the monolock lock server and its command-line tools.
package main

import (
	"fmt"
	"io"
	"os"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// subcommands maps each subcommand to its entry point. Each returns the
// process exit status.
var subcommands = map[string]func(args []string) int{
	"serve":   serveMain,
	"run":     runMain,
	"elect":   electMain,
	"observe": observeMain,
	"leader":  leaderMain,
	"locks":   locksMain,
	"kick":    kickMain,
	"certs":   certsMain,
	"version": func([]string) int { fmt.Println("monolock", version); return 0 },
}

func main() {
	if len(os.Args) < 2 {
		usage(os.Stderr)
		os.Exit(2)
	}
	cmd, ok := subcommands[os.Args[1]]
	if !ok {
		switch os.Args[1] {
		case "-h", "--help", "-help", "help":
			usage(os.Stdout)
			os.Exit(0)
		case "--version", "-version", "-V":
			os.Exit(subcommands["version"](nil))
		}
		fmt.Fprintf(os.Stderr, "monolock: unknown command %q\n", os.Args[1])
		usage(os.Stderr)
		os.Exit(2)
	}
	os.Exit(cmd(os.Args[2:]))
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: monolock <command> [flags]

commands:
  serve     run the lock server
  run       hold a lock while a command runs (flock for a fleet)
  elect     run a command while this process leads NAME (run with a value)
  observe   print every change of NAME's leader (--json for machines)
  leader    print NAME's leader's value; exit 0 leader, 1 none, 3 held back, 4 unknown
  locks     list locks, holders and waiters (admin API)
  kick      close a session, or a lock's holder: its lock goes to the next waiter (admin API)
  certs     make a CA and TLS certificates for the server and clients (mutual TLS)
  version   print the version (also: monolock --version)

Run "monolock <command> -h" for a command's flags.
`)
}
