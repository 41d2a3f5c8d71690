//go:build unix

// Package runcmd implements `monolock run`: flock(1) for a fleet. It holds a
// monolock lock while a command runs and stops the command's whole process
// group the moment the lock is lost.
package runcmd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/monolock/monolock/go/client"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// Exit statuses of monolock run besides the command's own. The numbers
// follow sysexits(3) and the conventions of timeout(1) and the shell.
const (
	ExitUsage       = 64  // bad flags or arguments, invalid lock name or lease
	ExitUnavailable = 69  // no server could be reached (or it was going away)
	ExitConflict    = 75  // busy with --no-wait, or --timeout expired; see --conflict-exit-code
	ExitRefused     = 76  // the server refused the request for good (e.g. not authorized)
	ExitLockLost    = 79  // the lock was lost while the command ran; the command was stopped
	ExitInternal    = 125 // monolock run itself failed
	ExitCannotExec  = 126 // the command was found but could not be started
	ExitNotFound    = 127 // the command was not found
)

const usageText = `usage: monolock run [flags] NAME -- CMD [ARGS...]

Hold the lock NAME while CMD runs, like flock(1) for a fleet of machines.

CMD runs in its own process group with MONOLOCK_TOKEN (the fencing token of
the grant, a decimal uint64) and MONOLOCK_NAME in its environment; pass the
token on to whatever the lock protects. The lock's connection is not
inherited by CMD. When the lock is lost (server unreachable for 0.8 x lease,
server error, connection reset), the whole process group gets SIGTERM at once
and SIGKILL after --grace, so that no grandchild goes on working unprotected.
SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to monolock run
are forwarded to the process group. A lost lock is never re-acquired. If
monolock run is killed with SIGKILL, CMD gets SIGKILL too (Linux).

Without --timeout and --no-wait, monolock run waits for the lock as long as
it takes, and retries (with a warning on stderr) while no server can be
reached.

flags:
%s
exit status:
  N     CMD's own exit status (128+S if CMD was killed by signal S)
  64    usage error: bad flags or arguments, invalid lock name or lease
  69    no server could be reached (--no-wait, or --timeout expired while
        the last attempt could not reach a server)
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
	grace        time.Duration
	dialTimeout  time.Duration
	verbose      bool
	tlsOn        bool
	tlsCA        string
	tlsCert      string
	tlsKey       string
	tlsName      string
	name         string
	command      []string
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

// flagHelp lists the flags GNU style, with their defaults.
func flagHelp(fset *flag.FlagSet) string {
	var b strings.Builder
	fset.VisitAll(func(f *flag.Flag) {
		arg, usage := flag.UnquoteUsage(f)
		dash := "--"
		if len(f.Name) == 1 {
			dash = "-"
		}
		fmt.Fprintf(&b, "  %s%s", dash, f.Name)
		if arg != "" {
			fmt.Fprintf(&b, " %s", arg)
		}
		fmt.Fprintf(&b, "\n        %s", usage)
		if f.DefValue != "" && f.DefValue != "0s" && f.DefValue != "false" && f.Name != "server" {
			fmt.Fprintf(&b, " (default %s)", f.DefValue)
		}
		b.WriteString("\n")
	})
	return b.String()
}

// parse reads the command line. For -h it prints the help to stdout and
// returns flag.ErrHelp.
func parse(args []string, stdout io.Writer) (*options, error) {
	o := &options{}
	fset := flag.NewFlagSet("monolock run", flag.ContinueOnError)
	fset.SetOutput(io.Discard)
	servers := &serverList{addrs: []string{client.DefaultServer}}
	if env := os.Getenv("MONOLOCK_SERVER"); env != "" {
		_ = servers.Set(env)
		servers.set = false
	}
	fset.Var(servers, "server", "server `ADDR` (host:port); repeat it or separate with commas for fallbacks (default: $MONOLOCK_SERVER, else "+client.DefaultServer+")")
	fset.DurationVar(&o.lease, "lease", client.DefaultLease, "lease `D` (whole milliseconds): a holder that dies keeps the lock this long at most")
	fset.DurationVar(&o.timeout, "timeout", 0, "give up waiting for the lock after `D` (default: wait as long as it takes)")
	fset.BoolVar(&o.noWait, "no-wait", false, "fail at once if the lock is held by someone else")
	fset.IntVar(&o.conflictCode, "conflict-exit-code", ExitConflict, "exit status `N` when the lock is busy or --timeout expires")
	fset.DurationVar(&o.grace, "grace", 10*time.Second, "after a lost lock, wait `D` between SIGTERM and SIGKILL")
	fset.DurationVar(&o.dialTimeout, "dial-timeout", client.DefaultDialTimeout, "give up connecting to one server after `D`")
	fset.BoolVar(&o.verbose, "v", false, "log waiting, grant and loss to stderr")
	fset.BoolVar(&o.tlsOn, "tls", false, "connect with TLS (implied by the other --tls-* flags)")
	fset.StringVar(&o.tlsCA, "tls-ca", "", "PEM `FILE` of CA certificates that sign the server's certificate (default: system roots)")
	fset.StringVar(&o.tlsCert, "tls-cert", "", "PEM `FILE` with the client certificate, for mutual TLS")
	fset.StringVar(&o.tlsKey, "tls-key", "", "PEM `FILE` with the client certificate's key")
	fset.StringVar(&o.tlsName, "tls-server-name", "", "`NAME` expected in the server's certificate (default: the host of --server)")

	if err := fset.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, usageText, flagHelp(fset))
		}
		return nil, err
	}
	rest := fset.Args()
	if len(rest) == 0 {
		return nil, errors.New("missing lock NAME")
	}
	o.name, rest = rest[0], rest[1:]
	if len(rest) > 0 && rest[0] == "--" {
		rest = rest[1:]
	}
	if len(rest) == 0 {
		return nil, errors.New("missing CMD after NAME --")
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
	case (o.tlsCert == "") != (o.tlsKey == ""):
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	return o, nil
}

// tlsConfig builds the TLS configuration of the flags, or nil without TLS.
func (o *options) tlsConfig() (*tls.Config, error) {
	if !o.tlsOn && o.tlsCA == "" && o.tlsCert == "" && o.tlsName == "" {
		return nil, nil
	}
	cfg := &tls.Config{ServerName: o.tlsName, MinVersion: tls.VersionTLS12}
	if o.tlsCA != "" {
		pem, err := os.ReadFile(o.tlsCA)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: no PEM certificate found", o.tlsCA)
		}
	}
	if o.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// forwarded are the signals passed on to the command's process group.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// Main runs `monolock run` with the arguments after "run" and returns the
// process exit status.
func Main(args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "monolock run: %v\nRun 'monolock run -h' for usage.\n", err)
		return ExitUsage
	}
	r := &runner{o: o, stderr: stderr}
	return r.run()
}

type runner struct {
	o      *options
	stderr io.Writer
	log    *slog.Logger
}

func (r *runner) errorf(format string, args ...any) {
	fmt.Fprintf(r.stderr, "monolock run: "+format+"\n", args...)
}

func (r *runner) run() int {
	level := slog.LevelWarn
	if r.o.verbose {
		level = slog.LevelDebug
	}
	r.log = slog.New(slog.NewTextHandler(r.stderr, &slog.HandlerOptions{Level: level}))

	tlsCfg, err := r.o.tlsConfig()
	if err != nil {
		r.errorf("tls: %v", err)
		return ExitUsage
	}
	c, err := client.New(
		client.WithServers(r.o.servers...),
		client.WithLease(r.o.lease),
		client.WithDialTimeout(r.o.dialTimeout),
		client.WithTLS(tlsCfg),
		client.WithLogger(r.log),
		client.WithOnWaiting(func(name string) { r.log.Info("waiting for the lock", "lock", name) }),
	)
	if err != nil {
		r.errorf("%v", err)
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
	r.log.Info("acquired", "lock", lock.Name(), "token", lock.Token(), "valid_until", time.Until(lock.ValidUntil()))
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
		lock, err = c.TryAcquire(ctx, r.o.name)
	} else {
		lock, err = c.Acquire(ctx, r.o.name)
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
		r.log.Info("lock busy", "lock", r.o.name)
		return nil, r.o.conflictCode
	case errors.Is(err, context.DeadlineExceeded) && errors.Is(err, client.ErrUnavailable):
		r.errorf("timed out: %v", err)
		return nil, ExitUnavailable
	case errors.Is(err, context.DeadlineExceeded):
		r.log.Info("timed out waiting for the lock", "lock", r.o.name, "timeout", r.o.timeout)
		return nil, r.o.conflictCode
	case errors.As(err, &se) && !se.Temporary():
		r.errorf("%v", err)
		return nil, ExitRefused
	case errors.As(err, &se), errors.Is(err, client.ErrUnavailable):
		r.errorf("%v", err)
		return nil, ExitUnavailable
	case errors.As(err, &pe):
		r.errorf("%q: %v", r.o.name, err)
		return nil, ExitUsage
	}
	r.errorf("%v", err)
	return nil, ExitInternal
}

// supervise runs the command under the lock and returns the exit status.
func (r *runner) supervise(lock *client.Lock, sigs <-chan os.Signal) int {
	cmd := exec.Command(r.o.command[0], r.o.command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(),
		"MONOLOCK_TOKEN="+strconv.FormatUint(lock.Token(), 10),
		"MONOLOCK_NAME="+lock.Name(),
	)
	// Its own process group, so that one signal reaches every descendant.
	// The lock's socket is close-on-exec (Go opens every descriptor so), so
	// the command cannot keep the lock alive after monolock run is gone.
	cmd.SysProcAttr = procAttr()
	if err := lock.Err(); err != nil {
		r.errorf("lock lost before the command started: %v", err)
		return ExitLockLost
	}
	if err := cmd.Start(); err != nil {
		r.errorf("%v", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return ExitNotFound
		}
		return ExitCannotExec
	}
	pgid := cmd.Process.Pid
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()

	for {
		select {
		case <-exited:
			if lock.Err() != nil && !errors.Is(lock.Err(), client.ErrReleased) {
				// Lost before the command finished: its work was not
				// fully protected, whatever its own status says.
				r.errorf("lock %q lost while the command ran: %v", lock.Name(), lock.Err())
				return ExitLockLost
			}
			return exitStatus(cmd.ProcessState)
		case s := <-sigs:
			r.log.Info("forwarding signal", "signal", s)
			_ = syscall.Kill(-pgid, s.(syscall.Signal))
		case <-lock.Done():
			r.errorf("lock %q lost: %v; stopping the command (SIGTERM, SIGKILL after %v)", lock.Name(), lock.Err(), r.o.grace)
			r.stopGroup(pgid, exited, sigs)
			return ExitLockLost
		}
	}
}

// stopGroup ends the process group: SIGTERM, then SIGKILL once the grace
// period is over, unless every member has exited before. Members outlive the
// command itself when it leaves children behind, so the group is watched,
// not the command.
func (r *runner) stopGroup(pgid int, exited <-chan struct{}, sigs <-chan os.Signal) {
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	grace := time.NewTimer(r.o.grace)
	defer grace.Stop()
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for {
		select {
		case <-grace.C:
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-exited
			return
		case s := <-sigs:
			_ = syscall.Kill(-pgid, s.(syscall.Signal))
		case <-poll.C:
			// The command itself stays a zombie until Wait reaps it, so
			// an empty group shows only after exited.
			select {
			case <-exited:
				if syscall.Kill(-pgid, 0) == syscall.ESRCH {
					return
				}
			default:
			}
		}
	}
}

// exitStatus maps how the command ended to our exit status.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
