package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
)

// kickMain is `monolock kick SESSION...`: end sessions through the admin
// API. Each gets ERROR 0x02 and its lock goes to the next waiter at once.
func kickMain(args []string) int {
	fs := flag.NewFlagSet("monolock kick", flag.ContinueOnError)
	var af adminFlags
	af.register(fs)
	if err := parseAdminCommand(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return printHelp(fs, "usage: monolock kick [flags] SESSION...\n\nEnds each session (ids from monolock locks) with ERROR 0x02; a held lock goes to the next waiter.")
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
