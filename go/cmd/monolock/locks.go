package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/monolock/monolock/go/client"
	"github.com/monolock/monolock/go/internal/admin"
	"github.com/monolock/monolock/go/internal/flaghelp"
	"github.com/monolock/monolock/go/internal/flagtype"
	"github.com/monolock/monolock/go/internal/termtext"
)

// adminFlags are the flags monolock locks and monolock kick share: where the
// admin API is and how to authenticate to it.
type adminFlags struct {
	addr, tokenFile, caFile string
	timeout                 time.Duration
}

func (a *adminFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&a.addr, "admin", admin.DefaultAddr, "admin API `address` (host:port or http(s):// URL)")
	fs.StringVar(&a.tokenFile, "admin-token-file", "", "`file` holding the admin API's bearer token")
	fs.StringVar(&a.caFile, "admin-ca", "", "PEM `file` of the CA that signed the admin API's certificate: use HTTPS")
	flagtype.DurationVar(fs, &a.timeout, "timeout", 10*time.Second, "give up after this `duration` (a bare number is seconds)")
}

// client builds the admin API client; errors are usage errors.
func (a *adminFlags) client() (*admin.Client, error) {
	var token string
	if a.tokenFile != "" {
		b, err := os.ReadFile(a.tokenFile)
		if err != nil {
			return nil, badUsage("--admin-token-file: %v", err)
		}
		token = strings.TrimSpace(string(b))
	}
	var tlsCfg *tls.Config
	if a.caFile != "" {
		var err error
		if tlsCfg, err = client.TLSFromFiles(client.TLSFiles{CA: a.caFile}); err != nil {
			return nil, badUsage("--admin-ca %v", err)
		}
	}
	if a.timeout <= 0 {
		return nil, badUsage("--timeout must be positive")
	}
	return admin.NewClient(a.addr, token, tlsCfg, a.timeout), nil
}

// adminEnvFlags are the flags of locks and kick that the environment can
// set, shared with monolock serve: MONOLOCK_ADMIN, MONOLOCK_ADMIN_TOKEN_FILE
// and MONOLOCK_ADMIN_CA.
var adminEnvFlags = map[string]bool{"admin": true, "admin-token-file": true, "admin-ca": true}

// parseAdminCommand parses flags and then the environment for the admin
// flags not given.
func parseAdminCommand(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return badUsage("%v", err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if !adminEnvFlags[f.Name] || set[f.Name] || envErr != nil {
			return
		}
		if v := os.Getenv(envName(f.Name)); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = badUsage("invalid value %q for %s: %v", v, envName(f.Name), err)
			}
		}
	})
	return envErr
}

// commandFailed prints err in one line and returns the exit status: 2 for
// usage errors, 1 otherwise.
func commandFailed(cmd string, err error) int {
	// The error may carry the server's text (its reason, a lock name).
	fmt.Fprintf(os.Stderr, "monolock %s: %s\n", cmd, termtext.Line(err.Error()))
	var ue *usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

func printHelp(fs *flag.FlagSet, usage string) int {
	fmt.Fprintln(os.Stdout, usage)
	fmt.Fprintln(os.Stdout)
	fmt.Fprint(os.Stdout, flaghelp.Text(fs, flaghelp.Options{}))
	return 0
}

// locksMain is `monolock locks`: list the server's locks, holders and
// waiters from its admin API, under its HA cell state.
func locksMain(args []string) int {
	fs := flag.NewFlagSet("monolock locks", flag.ContinueOnError)
	var af adminFlags
	af.register(fs)
	asJSON := fs.Bool("json", false, "print JSON: the admin API's lock listing, with the HA cell state in \"cell\"")
	if err := parseAdminCommand(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return printHelp(fs, "usage: monolock locks [flags]\n\n"+
				"Lists every lock: its holder, then its waiters in the order they will be granted it.\n"+
				"A long listing is read page by page (not one snapshot) and ends with \"N locks in M pages\".\n"+
				"A server of an HA cell (--etcd) first gets a line with its role, the active server\n"+
				"and the grace left; a standalone server gets none.")
		}
		return commandFailed("locks", err)
	}
	if fs.NArg() > 0 {
		return commandFailed("locks", badUsage("unexpected argument %q", fs.Arg(0)))
	}
	c, err := af.client()
	if err != nil {
		return commandFailed("locks", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), af.timeout)
	defer cancel()
	out, err := fetchLocks(ctx, c)
	if err != nil {
		return commandFailed("locks", err)
	}
	if out.Cell.Mode == cellUnknown {
		fmt.Fprintf(os.Stderr, "monolock locks: HA cell state unknown: %s\n", termtext.Line(out.Cell.Error))
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(out)
		return 0
	}
	writeLocks(os.Stdout, out, time.Now())
	if out.pages > 1 {
		// The listing was read page by page, not as one snapshot: say so.
		fmt.Fprintf(os.Stdout, "%d locks in %d pages\n", len(out.Locks), out.pages)
	}
	return 0
}

// locksOutput is what monolock locks shows; --json prints it. "locks" is
// GET /v1/locks's, unchanged; "cell" was added with the HA status.
type locksOutput struct {
	Locks []admin.Lock `json:"locks"`
	Cell  cellView     `json:"cell"`
	pages int          // GET /v1/locks pages read
}

// The modes of a cellView.
const (
	cellStandalone = "standalone" // no --etcd: the server serves its locks alone
	cellHA         = "ha"         // a server of an HA cell: role, leader, grace
	cellUnknown    = "unknown"    // /v1/cell failed or is missing: error says why
)

// cellView is the server's HA cell state. Every field is always present in
// the JSON, whatever the mode; role, leader and grace_remaining_ms are
// /v1/cell's, set in mode "ha" only.
type cellView struct {
	Mode             string `json:"mode"`
	Role             string `json:"role"`   // "leader" (active) or "follower" (passive)
	Leader           string `json:"leader"` // the active server's advertised address, "" if none is known
	GraceRemainingMS int64  `json:"grace_remaining_ms"`
	Error            string `json:"error"`
}

// fetchLocks reads the locks, then the cell state. Only the locks are
// needed: a cell state that cannot be read is reported in Cell.
func fetchLocks(ctx context.Context, c *admin.Client) (locksOutput, error) {
	locks, pages, err := c.LockPages(ctx, 0)
	if err != nil {
		return locksOutput{}, err
	}
	if locks == nil {
		locks = []admin.Lock{}
	}
	out := locksOutput{Locks: locks, pages: pages}
	cell, err := c.Cell(ctx)
	switch {
	case err == nil:
		out.Cell = cellView{Mode: cellHA, Role: cell.Role, Leader: cell.Leader, GraceRemainingMS: cell.GraceRemainingMS}
	case errors.Is(err, admin.ErrStandalone):
		out.Cell = cellView{Mode: cellStandalone}
	default:
		out.Cell = cellView{Mode: cellUnknown, Error: err.Error()}
	}
	return out, nil
}

// writeLocks prints the cell line (HA only) and the lock table.
func writeLocks(w io.Writer, out locksOutput, now time.Time) {
	if line := cellLine(out.Cell); line != "" {
		fmt.Fprintln(w, line)
		fmt.Fprintln(w)
	}
	writeLockTable(w, out.Locks, now)
}

// cellLine is the line above the lock table for a server of an HA cell:
//
//	role: active  leader: 10.0.0.1:7117  grace: 1.4 s left, new claims wait
//	role: passive  leader: 10.0.0.1:7117  (the active server lists the locks)
//
// and "" for a standalone server or an unknown state.
func cellLine(c cellView) string {
	if c.Mode != cellHA {
		return ""
	}
	leader := c.Leader
	if leader == "" {
		leader = "none known"
	} else {
		leader = termtext.Field(leader)
	}
	switch c.Role {
	case "leader":
		grace := "none left, granting"
		if c.GraceRemainingMS > 0 {
			grace = secondsText(c.GraceRemainingMS) + " left, new claims wait"
		}
		return fmt.Sprintf("role: active  leader: %s  grace: %s", leader, grace)
	case "follower":
		return fmt.Sprintf("role: passive  leader: %s  (the active server lists the locks)", leader)
	default: // a role this command does not know yet
		return fmt.Sprintf("role: %s  leader: %s", dash(termtext.Field(c.Role)), leader)
	}
}

// anyValue reports whether a session of locks has a value.
func anyValue(locks []admin.Lock) bool {
	for _, l := range locks {
		for _, list := range [][]admin.Session{l.Holders, l.Waiters} {
			for _, s := range list {
				if s.Value != "" || s.ValueHex != "" {
					return true
				}
			}
		}
		if l.Holder != nil && (l.Holder.Value != "" || l.Holder.ValueHex != "") {
			return true
		}
	}
	return false
}

// valueText is a session's value as the table shows it: the text, made
// safe for a terminal, or 0x and the hex of bytes that are not UTF-8.
func valueText(s admin.Session) string {
	if s.ValueHex != "" {
		return "0x" + s.ValueHex
	}
	return termtext.Field(s.Value)
}

// secondsText is ms as seconds with one decimal, rounded up: "1.4 s", and
// "0.1 s" for what is left of the last tenth.
func secondsText(ms int64) string {
	tenths := (ms + 99) / 100
	return fmt.Sprintf("%d.%d s", tenths/10, tenths%10)
}

// writeLockTable prints one row per session: the holder first, then the
// waiters in queue order, under each lock's name. Names, identities and
// addresses come from clients: termtext.Field shows them quoted and
// escaped when they are not plain, so that they cannot drive the terminal.
func writeLockTable(w io.Writer, locks []admin.Lock, now time.Time) {
	if len(locks) == 0 {
		fmt.Fprintln(w, "no locks")
		return
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	// A VALUE column only when a claim has one (protocol version 3).
	values := anyValue(locks)
	header := "LOCK\tSTATE\tSESSION\tTOKEN\tIDENTITY\tREMOTE\tLEASE\tFOR"
	if values {
		header += "\tVALUE"
	}
	fmt.Fprintln(tw, header)
	row := func(name, state string, s admin.Session) {
		tok := "-"
		if s.Token != 0 {
			tok = strconv.FormatUint(s.Token, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%v\t%v", name, state, s.ID, tok, dash(termtext.Field(s.Identity)), dash(termtext.Field(s.Remote)),
			time.Duration(s.LeaseMS)*time.Millisecond, now.Sub(s.Since).Round(time.Second))
		if values {
			fmt.Fprintf(tw, "\t%s", dash(valueText(s)))
		}
		fmt.Fprintln(tw)
	}
	for _, l := range locks {
		name := termtext.Field(l.Name)
		holders := l.Holders
		if holders == nil && l.Holder != nil {
			holders = []admin.Session{*l.Holder} // a server from before shared locks
		}
		for i, s := range holders {
			state := "held"
			if s.Mode == admin.ModeShared {
				state = "held shared"
				if i == 0 && l.Limit != nil && *l.Limit > 0 {
					state += fmt.Sprintf(" (%d of %d)", max(l.HoldersTotal, len(holders))+l.HeldBack, *l.Limit)
				}
			}
			row(name, state, s)
			name = ""
		}
		if more := l.HoldersTotal - len(holders); more > 0 {
			fmt.Fprintf(tw, "%s\t… and %d more holder%s\t-\t-\t-\t-\t-\t-\n", name, more, plural(more))
			name = ""
		}
		for _, s := range l.HeldBackHolders {
			state := "held back"
			if s.HeldBackUntil != nil {
				state += fmt.Sprintf(" (%v more)", s.HeldBackUntil.Sub(now).Round(time.Second))
			}
			row(name, state, s)
			name = ""
		}
		unnamed := l.HeldBack - len(l.HeldBackHolders) // past the listing's bound, or a server from before they were listed
		if len(l.HeldBackHolders) > 0 && unnamed > 0 {
			fmt.Fprintf(tw, "%s\t… and %d more held back\t-\t-\t-\t-\t-\t-\n", name, unnamed)
			name, unnamed = "", 0
		}
		switch {
		case unnamed > 0 && len(holders) > 0:
			fmt.Fprintf(tw, "%s\tdelayed (%d silent holder%s)\t-\t-\t-\t-\t-\t-\n", name, unnamed, plural(unnamed))
			name = ""
		case (l.Blocked || unnamed > 0) && len(l.HeldBackHolders) == 0:
			fmt.Fprintf(tw, "%s\tdelayed\t-\t-\t-\t-\t-\t-\n", name)
			name = ""
		}
		for i, s := range l.Waiters {
			state := "waiting #" + strconv.Itoa(i+1)
			if s.Mode == admin.ModeShared {
				state += " shared"
			}
			row(name, state, s)
			name = ""
		}
		if more := l.WaitersTotal - len(l.Waiters); more > 0 {
			fmt.Fprintf(tw, "%s\t… and %d more waiting\t-\t-\t-\t-\t-\t-\n", name, more)
		}
	}
	tw.Flush()
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
