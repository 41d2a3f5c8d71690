package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/monolock/monolock/go/internal/termtext"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// kickHelp is the help of monolock kick.
const kickHelp = `usage: monolock kick [flags] SESSION...
       monolock kick [flags] --lock NAME

Ends each session (ids from monolock locks), or the holder of the lock NAME,
with ERROR 0x02; a held lock goes
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
	lockName := fs.String("lock", "", "kick the holder of the lock `NAME` instead of sessions by id")
	if err := parseAdminCommand(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return printHelp(fs, kickHelp)
		}
		return commandFailed("kick", err)
	}
	lockGiven := false
	fs.Visit(func(f *flag.Flag) { lockGiven = lockGiven || f.Name == "lock" })
	switch {
	case lockGiven && fs.NArg() > 0:
		return commandFailed("kick", badUsage("give either session ids or --lock NAME, not both"))
	case lockGiven:
		return kickLockHolder(af, *lockName)
	}
	if fs.NArg() == 0 {
		return commandFailed("kick", badUsage("no session id given (see monolock locks), nor --lock NAME"))
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

// kickLockHolder is `monolock kick --lock NAME`: find the lock's holder and
// kick that session. Session ids are never reused, so a holder that has
// gone between the lookup and the kick makes the kick fail ("no session"),
// never hit the session the lock went to next.
func kickLockHolder(af adminFlags, name string) int {
	switch {
	case name == "":
		return commandFailed("kick", badUsage("--lock: empty lock name"))
	case len(name) > protocol.MaxNameLen || !utf8.ValidString(name):
		return commandFailed("kick", badUsage("--lock %s: not a lock name (at most %d bytes of UTF-8)", termtext.Field(name), protocol.MaxNameLen))
	}
	c, err := af.client()
	if err != nil {
		return commandFailed("kick", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), af.timeout)
	defer cancel()
	l, found, err := c.FindLock(ctx, name)
	switch {
	case err != nil:
		return commandFailed("kick", err)
	case !found:
		return commandFailed("kick", fmt.Errorf("lock %s is unknown to the server: no session holds it or waits for it", termtext.Field(name)))
	case l.Holder == nil && l.Blocked:
		return commandFailed("kick", fmt.Errorf("lock %s is not held: it is delayed (its holder went silent, or a restart waits out a holder of the previous run), %d waiting", termtext.Field(name), len(l.Waiters)))
	case l.Holder == nil:
		return commandFailed("kick", fmt.Errorf("lock %s is not held (%d waiting)", termtext.Field(name), len(l.Waiters)))
	case len(l.Holders) > 1:
		// Which of them is meant is the operator's choice, not ours.
		ids := make([]uint64, len(l.Holders))
		for i, h := range l.Holders {
			ids[i] = h.ID
		}
		return commandFailed("kick", fmt.Errorf("lock %s has %d shared holders (sessions %s): kick one by its session id", termtext.Field(name), len(l.Holders), sessionList(ids, maxListedSessions)))
	}
	if err := c.Kick(ctx, l.Holder.ID); err != nil {
		return commandFailed("kick", err)
	}
	fmt.Fprintf(os.Stdout, "kicked session %d, the holder of lock %s\n", l.Holder.ID, termtext.Field(name))
	return 0
}

// maxListedSessions is how many session ids a message lists: a lock may
// have thousands of shared holders, and a message is one line.
const maxListedSessions = 10

// sessionList lists at most max ids, then says how many more there are
// and where to see them all.
func sessionList(ids []uint64, max int) string {
	shown := make([]string, 0, min(len(ids), max))
	for _, id := range ids[:min(len(ids), max)] {
		shown = append(shown, strconv.FormatUint(id, 10))
	}
	list := strings.Join(shown, ", ")
	if more := len(ids) - len(shown); more > 0 {
		list += fmt.Sprintf(" and %d more: monolock locks lists them all", more)
	}
	return list
}
