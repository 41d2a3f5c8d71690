package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
)

// kickHelp is the help of monolock kick.
const kickHelp = `usage: monolock kick [flags] SESSION...

Ends each session (ids from monolock locks) with ERROR 0x02; a held lock goes
to the next waiter at once, without waiting for the kicked holder to stop. A
kicked monolock run stops its command as after any loss, but the next holder
may already run meanwhile: only the fencing token covers that. To hand a
monolock run holder's lock on without the overlap, send SIGTERM to that
monolock run instead: the lock goes when its command has ended.`

// kickMain is `monolock kick SESSION...`: end sessions through the admin
// API. Each gets ERROR 0x02 and its lock goes to the next waiter at once:
// a kick is the administrator's override, the one case where the server
// does not wait for the holder to have stopped (docs/monolock-run.md tells
// why, and how to stop a `monolock run` holder without the overlap).
func kickMain(args []string) int {
	fs := flag.NewFlagSet("monolock kick", flag.ContinueOnError)
	var af adminFlags
	af.register(fs)
	if err := parseAdminCommand(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return printHelp(fs, kickHelp)
		}
		return commandFailed("kick", err)
	}
	if fs.NArg() == 0 {
		return commandFailed("kick", badUsage("no session id given (see monolock locks)"))
	}
	ids := make([]uint64, 0, fs.NArg())
	for _, a := range fs.Args() {
		id, err := strconv.ParseUint(a, 10, 64)
		if err != nil {
			return commandFailed("kick", badUsage("session id %q is not a number", a))
		}
		ids = append(ids, id)
	}
	c, err := af.client()
	if err != nil {
		return commandFailed("kick", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), af.timeout)
	defer cancel()
	code := 0
	for _, id := range ids {
		if err := c.Kick(ctx, id); err != nil {
			code = commandFailed("kick", err)
			continue
		}
		fmt.Fprintf(os.Stdout, "kicked session %d\n", id)
	}
	return code
}
