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

	"github.com/monolock/monolock/go/internal/admin"
	"github.com/monolock/monolock/go/internal/termtext"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// kickHelp is the help of monolock kick.
const kickHelp = `usage: monolock kick [flags] SESSION...
       monolock kick [flags] --lock NAME [--all]

Ends each session (ids from monolock locks), or the holder of the lock NAME
(every holder of a shared lock with --all), with ERROR 0x02; a held lock goes
to the next waiter at once, without waiting for the kicked holder to stop. A
kicked monolock run stops its command as after any loss, but the next holder
may already run meanwhile: only the fencing token covers that. To hand a
monolock run holder's lock on without the overlap, send SIGTERM to that
monolock run instead: the lock goes when its command has ended.

A held-back holder (its connection was reset, or it went silent under the
lock delay: monolock locks shows it as "held back") keeps its lock for the
rest of its lease, since it may still be working, and nobody can tell it of
a kick: it is kicked only with --force, and after that only the fencing
token protects the resource against it.`

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
	all := fs.Bool("all", false, "with --lock: kick every holder of a shared lock")
	force := fs.Bool("force", false, "also kick held-back holders, whose connections are gone: only fencing protects the resource after that")
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
		return kickLockHolder(af, *lockName, *all, *force)
	case *all:
		return commandFailed("kick", badUsage("--all goes with --lock NAME"))
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
		resp, err := c.Kick(ctx, id, *force)
		if err != nil {
			code = commandFailed("kick", err)
			continue
		}
		if resp.HeldBack {
			fmt.Fprintf(os.Stdout, "kicked session %d, a held-back holder: only the fencing token protects the resource against it now\n", id)
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
func kickLockHolder(af adminFlags, name string, all, force bool) int {
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
	}
	targets, err := kickTargets(l, all, force)
	if err != nil {
		return commandFailed("kick", err)
	}
	code := 0
	for _, t := range targets {
		if _, err := c.Kick(ctx, t.ID, t.heldBack); err != nil {
			code = commandFailed("kick", err)
			continue
		}
		if t.heldBack {
			fmt.Fprintf(os.Stdout, "kicked session %d, a held-back holder of lock %s: only the fencing token protects the resource against it now\n", t.ID, termtext.Field(name))
			continue
		}
		fmt.Fprintf(os.Stdout, "kicked session %d, the holder of lock %s\n", t.ID, termtext.Field(name))
	}
	return code
}

// kickTarget is a holder that kick --lock is to end.
type kickTarget struct {
	ID       uint64
	heldBack bool
}

// kickTargets picks the holders of l that kick --lock ends: its live
// holder, every holder with all, held-back ones too with force. Which of
// several is meant is the operator's choice, not ours.
func kickTargets(l admin.Lock, all, force bool) ([]kickTarget, error) {
	var targets []kickTarget
	for _, h := range l.Holders {
		targets = append(targets, kickTarget{ID: h.ID})
	}
	if len(l.Holders) == 0 && l.Holder != nil { // an admin API from before shared locks
		targets = append(targets, kickTarget{ID: l.Holder.ID})
	}
	heldBack := make([]uint64, len(l.HeldBackHolders))
	for i, h := range l.HeldBackHolders {
		heldBack[i] = h.ID
		if force {
			targets = append(targets, kickTarget{ID: h.ID, heldBack: true})
		}
	}
	name := termtext.Field(l.Name)
	switch {
	case len(targets) == 0 && len(heldBack) > 0:
		return nil, fmt.Errorf("lock %s is held only by %d held-back holders (sessions %s), whose connections are gone and who may still be working: "+
			"kick them with --force, after which only the fencing token protects the resource", name, len(heldBack), sessionList(heldBack, maxListedSessions))
	case len(targets) == 0 && l.Blocked:
		return nil, fmt.Errorf("lock %s is not held: it is delayed (a restart waits out a holder of the previous run), %d waiting", name, len(l.Waiters))
	case len(targets) == 0:
		return nil, fmt.Errorf("lock %s is not held (%d waiting)", name, len(l.Waiters))
	case len(targets) > 1 && !all:
		ids := make([]uint64, len(targets))
		for i, t := range targets {
			ids[i] = t.ID
		}
		kind := "holders"
		if l.Mode == admin.ModeShared {
			kind = "shared holders"
		}
		return nil, fmt.Errorf("lock %s has %d %s (sessions %s): kick one by its session id, or every one with --all", name, len(targets), kind, sessionList(ids, maxListedSessions))
	}
	return targets, nil
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
