//go:build unix

// Package runcmd implements `monolock run`: flock(1) for a fleet. It holds a
// monolock lock while a command runs and, the moment the lock is lost,
// stops the command and everything it started, so that all of it is dead
// and reaped before the server can grant the lock to anyone else.
package runcmd

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/monolock/monolock/go/client"
	"github.com/monolock/monolock/go/internal/flagtype"
	"github.com/monolock/monolock/go/internal/termtext"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// Exit statuses of monolock run besides the command's own. The numbers
// follow sysexits(3) and the conventions of timeout(1) and the shell.
const (
	ExitUsage       = 64  // bad flags or arguments, invalid lock name or lease
	ExitUnavailable = 69  // no server could be reached (or it was going away), or none speaks the protocol
	ExitConflict    = 75  // busy with --no-wait, or --timeout expired; see --conflict-exit-code
	ExitRefused     = 76  // the server refused the request for good (e.g. not authorized)
	ExitLockLost    = 79  // the lock was lost while the command ran; the command was stopped
	ExitInternal    = 125 // monolock run itself failed
	ExitCannotExec  = 126 // the command was found but could not be started
	ExitNotFound    = 127 // the command was not found
)

const usageText = `usage: monolock run [flags] NAME -- CMD [ARGS...]
       monolock run [flags] NAME -c 'COMMAND STRING'

Hold the lock NAME while CMD runs, like flock(1) for a fleet of machines.
Flags go before NAME; only flock's -c STRING may also follow it. Short
flags combine and take attached values as with flock: -nw 1, -w1, -n -E1.

CMD runs in its own process group with MONOLOCK_TOKEN (the fencing token of
the grant, a decimal uint64) and MONOLOCK_NAME in its environment; pass the
token on to whatever the lock protects. The lock's connection is not
inherited by CMD. When the lock is lost (server unreachable for 0.8 x lease,
server error, connection reset), CMD and every process it started get
SIGTERM at once and SIGKILL after --grace, so that all of them are dead and
reaped before the server can grant the lock to anyone else (0.2 x lease
later): the process group, and on Linux also what left it (setsid, double
fork: monolock run is their subreaper). The lock's connection stays open
until they are reaped. What outlives that is logged with its pid. A lost
lock is never re-acquired.

SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to monolock run
are forwarded to the process group. CMD's parent is a watchdog process
(monolock run-watchdog) that kills CMD's whole tree at the lease's kill
deadline unless monolock run moves it on, so a stopped, starved or killed
monolock run cannot let CMD work past the lock (if monolock run is killed,
the lock is free at once: the fencing token must protect against the
moments the kill takes).

When stdin is the terminal, CMD's group gets the terminal while it runs, so
that CMD can read it and Ctrl-C reaches it. Ctrl-Z (SIGTSTP, SIGTTIN),
terminal or not, stops CMD's whole tree and monolock run together, and fg
continues both while the lock holds (no heartbeats while stopped: a stop
longer than 0.8 x lease loses the lock, and CMD never runs again).

With -s (--shared), CMD holds NAME beside other shared holders and never
while an exclusive one does: readers with -s, writers with the default -x.
With --limit N, at most N shared holders run at once: a semaphore of N
permits (every claimant of NAME must give the same N). Claims are granted
in arrival order, so a reader that comes after a waiting writer waits for
it. Shared claims need a server with protocol version 2.

Without --timeout and --no-wait, monolock run waits for the lock as long as
it takes, and retries while no server can be reached: with a warning on
stderr at once, then the same warning at most every 10 s with the number
left out. Moving past a passive server of an HA cell is normal and is told
with -v only. A duration D is a number of seconds (5, 0.5) or a number with a
unit (250ms, 1m30s).

flags:
%s
exit status:
  N     CMD's own exit status (128+S if CMD was killed by signal S)
  64    usage error: bad flags or arguments, invalid lock name or lease
  69    no server could be reached (--no-wait, or --timeout expired while
        the last attempt could not reach a server), or none speaks the
        monolock protocol (a wrong port)
  75    lock busy (--no-wait) or --timeout expired; see --conflict-exit-code
  76    the server refused the request for good (e.g. not authorized)
  79    the lock was lost while CMD ran; CMD was stopped as described above
  125   monolock run itself failed
  126   CMD could not be started
  127   CMD was not found
  128+S monolock run got signal S before CMD started
`

// options are the parsed command line.
type options struct {
	servers      []string
	lease        time.Duration
	timeout      time.Duration
	noWait       bool
	conflictCode int
	shared       bool          // -s, or implied by --limit
	exclusive    bool          // -x given
	limit        int           // --limit N; 0: none
	grace        time.Duration // after parse, as given; after graceFor, what applies
	graceGiven   bool
	dialTimeout  time.Duration
	verbose      bool
	logFormat    string
	tlsOn        bool
	tlsCA        string
	tlsCert      string
	tlsKey       string
	tlsName      string
	name         string
	command      []string
	shellCommand string // -c STRING
	shellGiven   bool
	value        string // --value: the claim's value (protocol version 3)
	elect        bool   // monolock elect: --value required, exclusive only
}

// serverList is a flag that may be repeated and takes comma-separated lists.
type serverList struct {
	addrs []string
	set   bool
}

func (s *serverList) String() string { return strings.Join(s.addrs, ",") }

func (s *serverList) Set(v string) error {
	if !s.set {
		s.addrs, s.set = nil, true // the first use replaces the default
	}
	for _, a := range strings.Split(v, ",") {
		if a = strings.TrimSpace(a); a != "" {
			s.addrs = append(s.addrs, a)
		}
	}
	return nil
}

// parse reads the command line. For -h it prints the help to stdout and
// returns flag.ErrHelp.
func parse(args []string, stdout io.Writer) (*options, error) {
	return parseAs("run", args, stdout)
}

// parseAs is parse for `monolock run` (cmd "run") or `monolock elect`.
func parseAs(cmd string, args []string, stdout io.Writer) (*options, error) {
	o := &options{elect: cmd == "elect"}
	fset := flag.NewFlagSet("monolock "+cmd, flag.ContinueOnError)
	fset.SetOutput(io.Discard)
	servers := &serverList{addrs: []string{client.DefaultServer}}
	if env := os.Getenv("MONOLOCK_SERVER"); env != "" {
		_ = servers.Set(env)
		servers.set = false
	}
	fset.Var(servers, "server", "server `ADDR` (host:port, or a bare host for port 7117); repeat it or separate with commas for fallbacks (default: $MONOLOCK_SERVER, else "+client.DefaultServer+")")
	flagtype.DurationVar(fset, &o.lease, "lease", client.DefaultLease, "lease `D`, whole milliseconds: a holder that dies keeps the lock this long at most")
	flagtype.DurationVar(fset, &o.timeout, "timeout", 0, "give up waiting for the lock after `D`; 0 is --no-wait (default: wait as long as it takes)")
	fset.BoolVar(&o.noWait, "no-wait", false, "fail at once if the lock is held by someone else")
	fset.IntVar(&o.conflictCode, "conflict-exit-code", ExitConflict, "exit status `N` when the lock is busy or --timeout expires")
	fset.BoolVar(&o.shared, "shared", false, "hold NAME beside other shared holders, never beside an exclusive one (a reader)")
	fset.BoolVar(&o.exclusive, "exclusive", false, "hold NAME alone (a writer; the default)")
	fset.IntVar(&o.limit, "limit", 0, "hold NAME as one of at most `N` shared holders: a semaphore of N permits, 1 to 65535; implies --shared")
	fset.StringVar(&o.value, "value", "", "claim NAME with `V`, which watchers and the admin API see (how to reach the leader, for elect); needs a server of protocol version 3")
	fset.StringVar(&o.shellCommand, "command", "", "run `STRING` with $SHELL -c (/bin/sh without $SHELL), as flock -c; also after NAME: NAME -c STRING")
	flagtype.DurationVar(fset, &o.grace, "grace", 0, "after a lost lock, wait `D` between SIGTERM and SIGKILL; the kill must be done 0.05 x lease before the server can grant the lock again, so D is at most 0.15 x lease - "+killAllowance.String()+" (default: that much, "+graceRoom(client.DefaultLease).String()+" with the default lease)")
	flagtype.DurationVar(fset, &o.dialTimeout, "dial-timeout", client.DefaultDialTimeout, "give up connecting to one server after `D`")
	fset.BoolVar(&o.verbose, "v", false, "also tell waiting, grant, forwarded signals and moves past a passive server on stderr")
	fset.StringVar(&o.logFormat, "log-format", "text", "`FORMAT` of stderr: text (plain lines) or json (one object per line, every detail)")
	fset.BoolVar(&o.tlsOn, "tls", false, "connect with TLS (implied by the other --tls-* flags)")
	fset.StringVar(&o.tlsCA, "tls-ca", "", "PEM `FILE` of CA certificates that sign the server's certificate (default: system roots)")
	fset.StringVar(&o.tlsCert, "tls-cert", "", "PEM `FILE` with the client certificate, for mutual TLS")
	fset.StringVar(&o.tlsKey, "tls-key", "", "PEM `FILE` with the client certificate's key")
	fset.StringVar(&o.tlsName, "tls-server-name", "", "`NAME` expected in the server's certificate (default: the host of --server)")
	defineShort(fset)

	if err := fset.Parse(flockArgs(fset, args)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			text := usageText
			if o.elect {
				text = electUsage + text
			}
			fmt.Fprintf(stdout, text, flagHelp(fset))
		}
		return nil, err
	}
	fset.Visit(func(f *flag.Flag) {
		if (f.Name == "timeout" || f.Name == "w") && o.timeout == 0 {
			o.noWait = true // as flock -w 0
		}
		o.graceGiven = o.graceGiven || f.Name == "grace"
		o.shellGiven = o.shellGiven || f.Name == "command" || f.Name == "c"
	})
	rest := fset.Args()
	if len(rest) == 0 {
		return nil, errors.New("missing lock NAME")
	}
	o.name, rest = rest[0], rest[1:]
	switch {
	case len(rest) > 0 && (rest[0] == "-c" || rest[0] == "--command"):
		// flock NAME -c STRING: exactly one argument, as flock has it.
		if o.shellGiven || len(rest) != 2 {
			return nil, fmt.Errorf("%s after NAME takes exactly one argument, the command string, and -c is given once", rest[0])
		}
		o.shellCommand, o.shellGiven, rest = rest[1], true, nil
	case o.shellGiven:
		if len(rest) > 0 {
			return nil, fmt.Errorf("-c gives the command: nothing goes after NAME, not %s", rest[0])
		}
	case len(rest) > 0 && rest[0] == "--":
		rest = rest[1:]
	case len(rest) > 0 && len(rest[0]) > 1 && rest[0][0] == '-':
		return nil, fmt.Errorf("flags go before the lock name: %s after %s (monolock run [flags] NAME -- CMD [ARGS...])", rest[0], displayName(o.name))
	}
	if o.shellGiven {
		if o.shellCommand == "" {
			return nil, errors.New("-c: the command string is empty")
		}
		// As flock: the user's shell, else /bin/sh.
		rest = []string{cmp.Or(os.Getenv("SHELL"), "/bin/sh"), "-c", o.shellCommand}
	}
	if len(rest) == 0 {
		return nil, errors.New("missing CMD after NAME -- (or -c STRING)")
	}
	o.command = rest
	o.servers = servers.addrs
	if len(o.servers) == 0 {
		return nil, errors.New("no --server given")
	}
	switch {
	case o.timeout < 0:
		return nil, errors.New("--timeout must not be negative")
	case o.grace < 0:
		return nil, errors.New("--grace must not be negative")
	case o.conflictCode < 0 || o.conflictCode > 255:
		return nil, errors.New("--conflict-exit-code must be 0..255")
	case o.shared && o.exclusive:
		return nil, errors.New("--shared (-s) and --exclusive (-x) exclude each other")
	case o.exclusive && o.limit != 0:
		return nil, errors.New("--limit makes a shared claim; it does not go with --exclusive (-x)")
	case o.limit < 0 || o.limit > math.MaxUint16:
		return nil, fmt.Errorf("--limit must be a number of permits from 1 to %d", math.MaxUint16)
	case (o.tlsCert == "") != (o.tlsKey == ""):
		return nil, errors.New("--tls-cert and --tls-key go together")
	case o.logFormat != "text" && o.logFormat != "json":
		return nil, fmt.Errorf("--log-format must be text or json, not %q", o.logFormat)
	case o.elect && o.value == "":
		return nil, errors.New("--value is required: followers reach the leader by it")
	case o.elect && (o.shared || o.limit != 0):
		return nil, errors.New("a leader leads alone: --shared and --limit do not go with elect")
	}
	return o, nil
}

// electUsage heads `monolock elect -h`: elect is run with a value.
const electUsage = `monolock elect NAME --value V -- CMD: campaign for leadership of NAME,
and run CMD while this process leads. It is monolock run with a value,
which followers see (monolock observe, monolock leader): everything below
holds, "the lock" being the term. On SIGTERM the command is stopped first,
then the term is resigned, and the next candidate leads at once.

`

// claimOptions are the client's options for the claim's mode and value.
func (o *options) claimOptions() []client.AcquireOption {
	var opts []client.AcquireOption
	switch {
	case o.limit > 0:
		opts = append(opts, client.Limit(o.limit))
	case o.shared:
		opts = append(opts, client.Shared())
	}
	if o.value != "" {
		opts = append(opts, client.Value([]byte(o.value)))
	}
	return opts
}

// displayName is a lock name for a message: quoted, and cut after 40
// characters, so that a name too long for the server does not fill the
// screen.
func displayName(name string) string {
	short, cut := shortName(name)
	if cut {
		return strconv.Quote(short) + "…"
	}
	return strconv.Quote(short)
}

// logName is the name for the "lock" attribute of --log-format json.
func logName(name string) string {
	short, cut := shortName(name)
	if cut {
		return short + "…"
	}
	return short
}

// shortName returns the first 40 characters of name, and whether that
// left anything out.
func shortName(name string) (string, bool) {
	const show = 40
	end := 0
	for i := 0; i < show && end < len(name); i++ {
		_, size := utf8.DecodeRuneInString(name[end:])
		end += size
	}
	return name[:end], end < len(name)
}

// tlsConfig builds the TLS configuration of the flags, or nil without TLS.
func (o *options) tlsConfig() (*tls.Config, error) {
	if !o.tlsOn && o.tlsCA == "" && o.tlsCert == "" && o.tlsName == "" {
		return nil, nil
	}
	return client.TLSFromFiles(client.TLSFiles{CA: o.tlsCA, Cert: o.tlsCert, Key: o.tlsKey, ServerName: o.tlsName})
}

// Main runs `monolock run` with the arguments after "run" and returns the
// process exit status.
func Main(args []string, stdout, stderr io.Writer) int { return mainAs("run", args, stdout, stderr) }

// MainElect runs `monolock elect`: run with a value, exclusive.
func MainElect(args []string, stdout, stderr io.Writer) int {
	return mainAs("elect", args, stdout, stderr)
}

func mainAs(cmd string, args []string, stdout, stderr io.Writer) int {
	o, err := parseAs(cmd, args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "monolock %s: %s\nRun 'monolock %s -h' for usage.\n", cmd, termtext.Line(err.Error()), cmd)
		return ExitUsage
	}
	r := &runner{o: o}
	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelInfo
	}
	// The client only warns (retries, filtered by retryFilter): waiting,
	// grant and loss are told once, by the runner.
	r.log = slog.New(newLogHandler(stderr, o.logFormat, level)).With("lock", logName(o.name))
	r.clientLog = slog.New(newRetryFilter(newLogHandler(stderr, o.logFormat, slog.LevelInfo), o.verbose)).With("lock", logName(o.name))
	return r.run()
}

// newLogHandler returns the handler of --log-format.
func newLogHandler(w io.Writer, format string, level slog.Level) slog.Handler {
	if format == "json" {
		return slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})
	}
	return newHumanHandler(w, level)
}

type runner struct {
	o         *options
	log       *slog.Logger // what monolock run tells on stderr
	clientLog *slog.Logger // what the client tells: retries
}

// fail tells an error on stderr: "monolock run: what: err".
func (r *runner) fail(what string, err error) {
	r.log.Error(what, "err", err)
}

func (r *runner) run() int {
	tlsCfg, err := r.o.tlsConfig()
	if err != nil {
		r.fail("tls", err)
		return ExitUsage
	}
	c, err := client.New(
		client.WithServers(r.o.servers...),
		client.WithLease(r.o.lease),
		client.WithDialTimeout(r.o.dialTimeout),
		client.WithTLS(tlsCfg),
		client.WithLogger(r.clientLog),
		client.WithOnWaiting(func(name string) { r.log.Info("waiting for the lock " + displayName(name)) }),
	)
	if err != nil {
		r.fail("", err)
		return ExitUsage
	}
	// After client.New, which has told a lease the protocol cannot carry.
	if r.o.grace, err = graceFor(r.o.lease, r.o.grace, r.o.graceGiven); err != nil {
		r.fail("", err)
		return ExitUsage
	}

	// Signals are caught from the start: before the command runs they
	// abandon the wait, afterwards they go to the command.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	lock, status := r.acquire(c, sigs)
	if lock == nil {
		return status
	}
	defer lock.Release()
	r.log.Info(fmt.Sprintf("acquired %s, token %d", displayName(lock.Name()), lock.Token()),
		"token", lock.Token(), "valid_for", time.Until(lock.ValidUntil()).Round(time.Millisecond).String())
	return r.supervise(lock, sigs)
}

// acquire takes the lock, or returns the exit status explaining why not.
func (r *runner) acquire(c *client.Client, sigs <-chan os.Signal) (*client.Lock, int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if r.o.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, r.o.timeout)
		defer cancel()
	}
	var got os.Signal
	stopWatch := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case got = <-sigs:
			cancel()
		case <-stopWatch:
		}
	}()
	var (
		lock *client.Lock
		err  error
	)
	if r.o.noWait {
		lock, err = c.TryAcquire(ctx, r.o.name, r.o.claimOptions()...)
	} else {
		lock, err = c.Acquire(ctx, r.o.name, r.o.claimOptions()...)
	}
	close(stopWatch)
	<-watched
	if got != nil {
		if lock != nil {
			lock.Release()
		}
		return nil, 128 + int(got.(syscall.Signal))
	}
	if err == nil {
		return lock, 0
	}
	var (
		pe *protocol.Error
		se *client.ServerError
	)
	switch {
	case errors.Is(err, client.ErrBusy):
		r.log.Info("lock " + displayName(r.o.name) + " is busy")
		return nil, r.o.conflictCode
	case errors.Is(err, context.DeadlineExceeded) && errors.Is(err, client.ErrUnavailable):
		r.fail("timed out after "+r.o.timeout.String(), err)
		return nil, ExitUnavailable
	case errors.Is(err, context.DeadlineExceeded):
		r.log.Info("timed out after " + r.o.timeout.String() + " waiting for the lock " + displayName(r.o.name))
		return nil, r.o.conflictCode
	case errors.As(err, &se) && !se.Temporary():
		r.fail("cannot take the lock "+displayName(r.o.name), err)
		return nil, ExitRefused
	case errors.As(err, &se), errors.Is(err, client.ErrUnavailable):
		r.fail("", err)
		return nil, ExitUnavailable
	case errors.As(err, &pe) && (pe.Code == protocol.ErrNameTooLong.Code || pe.Code == protocol.ErrNameNotUTF8.Code):
		r.fail("lock name "+displayName(r.o.name), err)
		return nil, ExitUsage
	case errors.As(err, &pe):
		r.fail("", err)
		return nil, ExitUsage
	}
	r.fail("", err)
	return nil, ExitInternal
}
