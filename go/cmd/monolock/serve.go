package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/monolock/monolock/go/client"
	"github.com/monolock/monolock/go/internal/acl"
	"github.com/monolock/monolock/go/internal/admin"
	"github.com/monolock/monolock/go/internal/configfile"
	"github.com/monolock/monolock/go/internal/flaghelp"
	"github.com/monolock/monolock/go/internal/flagtype"
	"github.com/monolock/monolock/go/internal/ha"
	"github.com/monolock/monolock/go/internal/lograte"
	"github.com/monolock/monolock/go/internal/metrics"
	"github.com/monolock/monolock/go/internal/server"
	"github.com/monolock/monolock/go/internal/tlsconfig"
	"github.com/monolock/monolock/go/internal/tokenstore"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// defaultDrainTimeout bounds how long a graceful stop waits for sessions to
// take their ERROR 0x01 before the remaining connections are cut.
const defaultDrainTimeout = 10 * time.Second

// serveFlags is the parsed command line of monolock serve.
type serveFlags struct {
	listen, dataDir              string
	handshake                    time.Duration
	tlsCert, tlsKey, tlsClientCA string
	aclPath                      string
	adminAddr, adminTokenFile    string
	adminTLS                     bool
	adminExplicit                bool // --admin was given (flag or environment)
	logFormat, logLevel          string
	maxSessions, maxPerAddr      int
	maxStreams                   int
	perAddrV6Prefix              int
	drainTimeout, lockDelay      time.Duration
	checkConfig                  bool
	tokenFloor                   uint64
	maxLease                     time.Duration
	etcd, etcdPrefix, advertise  string
	etcdTTL                      time.Duration
	etcdCA, etcdCert, etcdKey    string
	adminAllowedHosts            string
	adminMaxConns                int
	readyFile                    string
}

// serveSetup is everything serve builds from its flags before it starts.
type serveSetup struct {
	flags      serveFlags
	log        *slog.Logger
	tls        *tlsconfig.Reloader // nil without TLS
	acl        *acl.Authorizer     // nil without an ACL
	adminToken string
	adminHosts []string // Host names the admin API answers to, besides loopback

	adminRefusals *lograte.Line // "admin connection limit reached"; nil without the admin API
}

// usageError is a bad flag, environment variable or file: one line, exit 2.
// see is where the line points for more, when not at -h: the page that
// describes a file's format.
type usageError struct{ msg, see string }

func (e *usageError) Error() string { return e.msg }

func badUsage(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// aclFormat is where a bad ACL line points: the page that describes it.
const aclFormat = `the format: docs/operating.md, "Authorization (ACL)"`

// envName is the environment variable that sets a flag: MONOLOCK_ and the
// flag's name in upper case with '_' for '-'.
func envName(flagName string) string {
	return "MONOLOCK_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func newServeFlagSet(f *serveFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("monolock serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported in one line by the caller
	fs.StringVar(&f.listen, "listen", "127.0.0.1:7117", "TCP `address` to accept lock sessions on")
	fs.StringVar(&f.dataDir, "data-dir", defaultDataDir(), "`directory` for the fencing token high-water mark (created if missing)")
	flagtype.DurationVar(fs, &f.handshake, "handshake-timeout", server.DefaultHandshakeTimeout,
		"close a connection that has not sent its ACQUIRE within this `duration`")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "PEM `file` with the server certificate chain: serve TLS (1.2+, 1.3 preferred)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "PEM `file` with the private key of --tls-cert")
	fs.StringVar(&f.tlsClientCA, "tls-client-ca", "", "PEM `file` of CAs; require client certificates signed by them (mutual TLS)")
	fs.StringVar(&f.aclPath, "acl", "", "ACL `file` mapping client identities to lock-name patterns (reloaded on SIGHUP)")
	fs.StringVar(&f.adminAddr, "admin", admin.DefaultAddr, "admin HTTP `address` (dashboard, locks, kick, metrics, health), or \"off\"")
	fs.StringVar(&f.adminTokenFile, "admin-token-file", "", "`file` holding a bearer token the admin API requires")
	fs.BoolVar(&f.adminTLS, "admin-tls", false, "serve the admin API over TLS with --tls-cert and --tls-key")
	fs.StringVar(&f.adminAllowedHosts, "admin-allowed-hosts", "",
		"`hosts` (names or IP addresses, comma-separated) the admin API answers to besides loopback and its listen host")
	fs.IntVar(&f.adminMaxConns, "admin-max-connections", defaultAdminConns,
		fmt.Sprintf("close admin API connections beyond this many open at once (1 to %d, counted in the %d descriptors --max-sessions leaves)", maxAdminConns, fdReserve))
	fs.StringVar(&f.logFormat, "log-format", "text", "log `format`: text or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "log `level`: debug, info, warn or error")
	fs.IntVar(&f.maxSessions, "max-sessions", defaultMaxSessions(),
		"refuse connections beyond this many open sessions (0: no limit; default: the open file limit less "+fmt.Sprint(fdReserve)+")")
	fs.IntVar(&f.maxPerAddr, "max-sessions-per-addr", 0, "refuse connections beyond this many open sessions from one client address (0: no limit)")
	fs.IntVar(&f.maxStreams, "max-streams", protocol.DefaultMaxStreams,
		"the most claims and watches one session (protocol version 4) may have open at once; each also counts against --max-sessions and --max-sessions-per-addr")
	fs.IntVar(&f.perAddrV6Prefix, "max-sessions-per-addr-ipv6-prefix", server.DefaultPerAddrIPv6Prefix,
		"for --max-sessions-per-addr, IPv6 clients count by this many leading `bits` of their address (128: each address alone)")
	flagtype.DurationVar(fs, &f.drainTimeout, "drain-timeout", defaultDrainTimeout,
		"on SIGTERM, wait this long for sessions to take their shutdown ERROR before cutting them")
	flagtype.DurationVar(fs, &f.lockDelay, "lock-delay", 0,
		"after a holder goes silent (lease expired), keep its lock from the next waiter for this long (0: off)")
	fs.StringVar(&f.etcd, "etcd", "", "etcd `endpoints` (host:port,...): run as one server of an HA cell (docs/ha.md)")
	fs.StringVar(&f.etcdPrefix, "etcd-prefix", "/monolock/default/", "etcd key `prefix` of the cell")
	fs.StringVar(&f.advertise, "advertise", "", "`address` clients use to reach this server (HA; default: --listen)")
	flagtype.DurationVar(fs, &f.etcdTTL, "etcd-ttl", ha.DefaultTTL, "etcd lease `TTL` of the leadership (whole seconds, at least 2s)")
	fs.StringVar(&f.etcdCA, "etcd-ca", "", "PEM `file` of CAs that sign the etcd servers' certificates")
	fs.StringVar(&f.etcdCert, "etcd-cert", "", "PEM client certificate `file` for etcd")
	fs.StringVar(&f.etcdKey, "etcd-key", "", "PEM private key `file` of --etcd-cert")
	flagtype.DurationVar(fs, &f.maxLease, "max-lease", 0, "refuse leases longer than this `duration` with ERROR 0x17 (0: no limit, the protocol's 49.7 days)")
	fs.Uint64Var(&f.tokenFloor, "token-floor", 0, "issue only tokens above `N`: to restart a data directory whose token-hwm was lost, give N at least the largest token ever issued")
	fs.StringVar(&f.readyFile, "ready-file", "",
		"once the lock port and the admin API listen, write their addresses as JSON to this `file` (atomically; removed on exit; see docs/operating.md)")
	fs.BoolVar(&f.checkConfig, "check-config", false, "check the flags and files, print the result and exit")
	return fs
}

// parseServeFlags reads the command line, then the environment for every
// flag the command line did not set.
func parseServeFlags(args []string, getenv func(string) string) (serveFlags, error) {
	var f serveFlags
	fs := newServeFlagSet(&f)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return f, err
		}
		return f, badUsage("%v", err)
	}
	if fs.NArg() > 0 {
		return f, badUsage("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	var envErr error
	fs.VisitAll(func(fl *flag.Flag) {
		if set[fl.Name] || envErr != nil {
			return
		}
		v := getenv(envName(fl.Name))
		if v == "" {
			return
		}
		if err := fs.Set(fl.Name, v); err != nil {
			envErr = badUsage("invalid value %q for %s: %v", v, envName(fl.Name), err)
		}
		set[fl.Name] = true
	})
	f.adminExplicit = set["admin"]
	return f, envErr
}

// setUp checks the flags and loads the files they name. Every error is a
// usage error: one line, exit status 2.
func setUp(f serveFlags, stderr io.Writer) (*serveSetup, error) {
	switch {
	case f.dataDir == "":
		return nil, badUsage("no --data-dir given and no home directory to default to")
	case f.handshake <= 0:
		return nil, badUsage("--handshake-timeout must be positive, got %v", f.handshake)
	case f.drainTimeout <= 0:
		return nil, badUsage("--drain-timeout must be positive, got %v", f.drainTimeout)
	case f.lockDelay < 0:
		return nil, badUsage("--lock-delay must not be negative, got %v", f.lockDelay)
	case f.maxSessions < 0 || f.maxPerAddr < 0:
		return nil, badUsage("--max-sessions and --max-sessions-per-addr must not be negative")
	case f.maxStreams < 1:
		return nil, badUsage("--max-streams must be at least 1, got %d", f.maxStreams)
	case f.adminMaxConns < 1 || f.adminMaxConns > maxAdminConns:
		return nil, badUsage("--admin-max-connections must be 1 to %d (it is counted in the %d file descriptors --max-sessions leaves), got %d",
			maxAdminConns, fdReserve, f.adminMaxConns)
	case f.perAddrV6Prefix < 1 || f.perAddrV6Prefix > 128:
		return nil, badUsage("--max-sessions-per-addr-ipv6-prefix must be 1 to 128, got %d", f.perAddrV6Prefix)
	}
	if _, _, err := net.SplitHostPort(f.listen); err != nil {
		return nil, badUsage("--listen %q: %v", f.listen, err)
	}
	if st, err := os.Stat(f.dataDir); err == nil && !st.IsDir() {
		return nil, badUsage("--data-dir %s is not a directory", f.dataDir)
	}
	if err := checkReadyPath(f.readyFile); err != nil {
		return nil, err
	}
	if f.etcd == "" {
		// The data directory's state as the start will find it, so that
		// --check-config does not say OK to a start that will refuse.
		if err := checkDataDir(f.dataDir, f.tokenFloor); err != nil {
			return nil, err
		}
	}
	s := &serveSetup{flags: f}
	var err error
	if s.log, err = newLogger(f.logFormat, f.logLevel, stderr); err != nil {
		return nil, err
	}
	if f.tlsCert != "" || f.tlsKey != "" || f.tlsClientCA != "" {
		if f.tlsCert == "" || f.tlsKey == "" {
			return nil, badUsage("TLS needs both --tls-cert and --tls-key")
		}
		if s.tls, err = tlsconfig.Load(tlsconfig.Files{Cert: f.tlsCert, Key: f.tlsKey, ClientCA: f.tlsClientCA}); err != nil {
			return nil, badUsage("%v", err)
		}
	}
	if f.aclPath != "" {
		if s.acl, err = acl.Load(f.aclPath); err != nil {
			return nil, &usageError{msg: fmt.Sprintf("--acl %v", err), see: aclFormat}
		}
	}
	if f.adminTokenFile != "" {
		b, err := configfile.Read(f.adminTokenFile, 4096)
		if err != nil {
			return nil, badUsage("--admin-token-file: %v", err)
		}
		if s.adminToken = strings.TrimSpace(string(b)); s.adminToken == "" || strings.ContainsAny(s.adminToken, " \t\r\n") {
			return nil, badUsage("--admin-token-file %s: want one token (no spaces) on one line", f.adminTokenFile)
		}
	}
	if f.adminAddr != admin.Off {
		if _, _, err := net.SplitHostPort(f.adminAddr); err != nil {
			return nil, badUsage("--admin %q: %v (or \"off\")", f.adminAddr, err)
		}
		if f.adminTLS && s.tls == nil {
			return nil, badUsage("--admin-tls needs --tls-cert and --tls-key")
		}
		if !admin.IsLoopback(f.adminAddr) && !f.adminTLS && s.adminToken == "" {
			return nil, badUsage("refusing to serve the admin API on non-loopback %s without --admin-tls or --admin-token-file", f.adminAddr)
		}
	}
	if s.adminHosts, err = admin.ParseAllowedHosts(f.adminAllowedHosts); err != nil {
		return nil, badUsage("--admin-allowed-hosts %v", err)
	}
	// The etcd client's files are read here too, so that --check-config
	// and a start with a broken file fail alike, before anything listens.
	if f.etcdCA != "" || f.etcdCert != "" || f.etcdKey != "" {
		if f.etcdCert == "" != (f.etcdKey == "") {
			return nil, badUsage("etcd client TLS needs both --etcd-cert and --etcd-key")
		}
		if _, err := etcdTLS(f.etcdCA, f.etcdCert, f.etcdKey); err != nil {
			return nil, badUsage("%v", err)
		}
	}
	return s, nil
}

// summary is what --check-config prints after "configuration OK": the
// settings an operator most often gets wrong, one per line.
func (s *serveSetup) summary() string {
	f := s.flags
	var b strings.Builder
	listen := "plain TCP"
	if s.tls != nil {
		listen = "TLS"
		if s.tls.MutualTLS() {
			listen = "mutual TLS, client CA " + f.tlsClientCA
		}
	}
	fmt.Fprintf(&b, "  listen      %s (%s)\n", f.listen, listen)
	if s.acl != nil {
		rules := "rules"
		if s.acl.Rules().Len() == 1 {
			rules = "rule"
		}
		fmt.Fprintf(&b, "  acl         %s (%d %s)\n", f.aclPath, s.acl.Rules().Len(), rules)
	} else {
		fmt.Fprintf(&b, "  acl         none: every client may take every lock\n")
	}
	if f.adminAddr == admin.Off {
		fmt.Fprintf(&b, "  admin       off\n")
	} else {
		fmt.Fprintf(&b, "  admin       %s (tls %v, token %v)\n", f.adminAddr, f.adminTLS, s.adminToken != "")
	}
	if f.etcd != "" {
		fmt.Fprintf(&b, "  tokens      HA cell in etcd %s, prefix %s\n", f.etcd, f.etcdPrefix)
	} else {
		fmt.Fprintf(&b, "  data dir    %s\n", f.dataDir)
	}
	fmt.Fprintf(&b, "  sessions    max %d, per address %d (0: no limit)\n", f.maxSessions, f.maxPerAddr)
	return b.String()
}

// fdReserve is how many file descriptors the default --max-sessions leaves
// for everything but sessions: the data directory (lock, mark and marker
// files), the listeners, admin API connections, TLS and ACL files read on
// SIGHUP, stdio, the runtime's poller, and one spare to accept and close a
// connection over the limit rather than fail the accept.
const fdReserve = 64

// The admin API's connections count in fdReserve: its listener closes any
// connection beyond --admin-max-connections at once, so it holds at most
// that many descriptors plus the one it is closing, and no number of
// admin connections can take the lock port's. maxAdminConns is half the
// reserve; the other half covers the rest of the list above (about 20:
// 3 stdio, 2 listeners, the poller, 3-4 data-directory files, up to 4
// files of a reload, the spare, etcd connections with --etcd) with room.
const (
	defaultAdminConns = 16 // scrapers, health probes, monolock locks/kick: a handful at a time
	maxAdminConns     = fdReserve / 2
)

// Timeouts of the admin API's HTTP server. None of its requests has a
// body, and each answer is small (a listing page is at most about 1.2 MB):
// a peer that sends or reads slower than this is cut, so that it holds
// neither a connection nor a listing's memory for longer.
const (
	adminHeaderTimeout = 10 * time.Second
	adminReadTimeout   = 10 * time.Second
	adminWriteTimeout  = 10 * time.Second
	adminIdleTimeout   = time.Minute
	adminMaxHeader     = 64 << 10 // a bearer token and a few headers; the default is 1 MB per connection
)

// defaultMaxSessions is the open file limit (RLIMIT_NOFILE; Go raises the
// soft limit to the hard one at start-up) less fdReserve, at least 1: a
// flood of connections is then refused cleanly instead of running the
// process out of file descriptors. 0 (no limit) where there is no such
// limit to read.
func defaultMaxSessions() int {
	limit, ok := openFileLimit()
	if !ok {
		return 0
	}
	return maxSessionsFor(limit)
}

func maxSessionsFor(openFiles uint64) int {
	if openFiles <= fdReserve {
		return 1
	}
	return int(min(openFiles-fdReserve, math.MaxInt32))
}

func newLogger(format, level string, w io.Writer) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, badUsage("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, badUsage("--log-format %q: want text or json", format)
}

// serveMain runs the lock server until SIGTERM or SIGINT.
func serveMain(args []string) int {
	f, err := parseServeFlags(args, os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stdout, "usage: monolock serve [flags]")
		fmt.Fprintln(os.Stdout, "\nEvery flag can also be set by an environment variable: --max-sessions by MONOLOCK_MAX_SESSIONS, and so on.")
		fmt.Fprintln(os.Stdout, "The command line wins over the environment. SIGHUP reloads the --acl and TLS files. See docs/operating.md.")
		fmt.Fprintln(os.Stdout)
		fmt.Fprint(os.Stdout, flaghelp.Text(newServeFlagSet(&serveFlags{}), flaghelp.Options{}))
		return 0
	}
	var setup *serveSetup
	if err == nil {
		setup, err = setUp(f, os.Stderr)
	}
	if err != nil {
		see := "see monolock serve -h"
		if ue := (*usageError)(nil); errors.As(err, &ue) && ue.see != "" {
			see = ue.see
		}
		fmt.Fprintf(os.Stderr, "monolock serve: %v (%s)\n", err, see)
		return 2
	}
	if f.checkConfig {
		fmt.Fprintln(os.Stdout, "monolock serve: configuration OK")
		fmt.Fprint(os.Stdout, setup.summary())
		return 0
	}
	return serve(setup)
}

// serve starts the lock server and the admin API and serves until a
// signal. (`monolock run`, the command runner, is run.go.)
func serve(s *serveSetup) int {
	f, log := s.flags, s.log
	if f.readyFile != "" {
		if err := clearReadyFile(f.readyFile); err != nil {
			log.Error("cannot start", "err", err)
			return 1
		}
	}
	m := metrics.New()
	cfg := server.Config{
		DataDir:            f.dataDir,
		HandshakeTimeout:   f.handshake,
		Logger:             log,
		MaxSessions:        f.maxSessions,
		MaxSessionsPerAddr: f.maxPerAddr,
		MaxStreams:         f.maxStreams,
		PerAddrIPv6Prefix:  f.perAddrV6Prefix,
		LockDelay:          f.lockDelay,
		TokenFloor:         f.tokenFloor,
		MaxLease:           f.maxLease,
		Observer:           m,
	}
	if s.acl != nil {
		cfg.Authorizer = s.acl
	}
	var node *ha.Node
	if f.etcd != "" {
		var err error
		if node, err = newHANode(f, log); err != nil {
			log.Error("cannot start", "err", err)
			return 1
		}
		defer node.Close()
		cfg.Tokens, cfg.Gate = node, node
	}
	srv, err := server.New(cfg)
	if inUse := (*tokenstore.InUseError)(nil); errors.As(err, &inUse) {
		// Say which setting to change, in the docs' words.
		err = fmt.Errorf("--data-dir %s is in use by another server (%s is locked): stop that server, or give this one its own --data-dir", f.dataDir, inUse.Lock)
	}
	if err != nil {
		log.Error("cannot start", "err", err)
		return 1
	}
	m.SetSource(srv)
	m.SetMaxSessions(f.maxSessions)
	// Signals are caught before the "listening" line and the ready file,
	// which tell tools that the server is up: a SIGTERM or SIGHUP right
	// after them must not meet the default action (death, without a drain).
	// A reader of stderr that goes away (`monolock serve 2>&1 | logger`, a
	// restarted log collector) must not take every lock with it: with
	// SIGPIPE ignored, a log write fails with EPIPE instead of killing us.
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	// Sessions prove liveness by heartbeats within their lease; TCP
	// keep-alive would only add system calls to every accepted connection.
	lc := net.ListenConfig{KeepAlive: -1}
	ln, err := lc.Listen(context.Background(), "tcp", f.listen)
	if err != nil {
		log.Error("cannot listen", "err", err)
		return 1
	}
	if s.tls != nil {
		ln = server.NewTLSListener(ln, s.tls.Server())
	}
	// Tests and tools read the bound addresses from --ready-file, not from
	// this line.
	log.Info("listening", "addr", ln.Addr().String())
	if node != nil {
		log.Info("token store: the HA cell's, in etcd", "etcd", f.etcd, "prefix", f.etcdPrefix, "advertise", node.Advertise())
	} else {
		log.Info("token store", "data_dir", f.dataDir)
	}
	if s.tls != nil {
		log.Info("TLS on", "mutual", s.tls.MutualTLS())
	}
	if s.acl != nil {
		log.Info("ACL loaded", "file", s.acl.Path(), "rules", s.acl.Rules().Len())
	}
	log.Info("session limit", "max_sessions", f.maxSessions, "max_sessions_per_addr", f.maxPerAddr)

	adminSrv, adminAddr, code := startAdmin(s, srv, m)
	if code != 0 {
		ln.Close()
		return code
	}

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	// The node leaves the cell only after the drain: a leader that
	// stepped down first would leave the record of a crash, and the next
	// leader would wait out every lease instead of only those of holders
	// that may not know (docs/ha.md).
	nodeCtx, stopNode := context.WithCancel(context.Background())
	nodeDone := make(chan struct{})
	leaveCell := func() { stopNode(); <-nodeDone }
	if node != nil {
		go func() { defer close(nodeDone); node.Run(nodeCtx, srv) }()
	} else {
		close(nodeDone)
	}
	// Ready means listening, also in an HA cell (leading comes later).
	if f.readyFile != "" {
		info := readyInfo{LockAddr: ln.Addr().String(), AdminAddr: adminAddr, PID: os.Getpid(), Version: version}
		if err := writeReadyFile(f.readyFile, info); err != nil {
			log.Error("cannot write the ready file", "err", err)
			shutdown(srv, adminSrv, f.drainTimeout, log)
			<-served
			return 1
		}
		defer removeReadyFile(f.readyFile, info.PID)
	}
	// Reloads run off this loop: a file that blocks its reader (a FIFO, a
	// hung network mount) must not keep SIGTERM from stopping the server.
	reloads := newReloader(func() { reload(s, m) })
wait:
	for {
		select {
		case <-hup:
			reloads.request(log)
		case err := <-served:
			log.Error("serve failed", "err", err)
			shutdown(srv, adminSrv, f.drainTimeout, log)
			leaveCell()
			return 1
		case <-ctx.Done():
			break wait
		}
	}
	log.Info("shutting down", "drain_timeout", f.drainTimeout)
	reloads.abandon(log)
	code = 0
	if err := shutdown(srv, adminSrv, f.drainTimeout, log); err != nil {
		code = 1
	}
	leaveCell()
	<-served
	if s.adminRefusals != nil {
		s.adminRefusals.Flush()
	}
	log.Info("stopped")
	return code
}

// startAdmin starts the admin API unless it is off. If the default address
// is taken (another server on this machine, a test run), the lock server
// runs without it and says so; an address given explicitly must work.
func startAdmin(s *serveSetup, srv *server.Server, m *metrics.Metrics) (hs *http.Server, addr string, code int) {
	f, log := s.flags, s.log
	if f.adminAddr == admin.Off {
		log.Info("admin API off")
		return nil, "", 0
	}
	aln, err := net.Listen("tcp", f.adminAddr)
	if err != nil {
		if !f.adminExplicit {
			log.Warn("admin API not started: default address unavailable; set --admin to another address or \"off\"",
				"addr", f.adminAddr, "err", err)
			return nil, "", 0
		}
		log.Error("cannot listen for the admin API", "addr", f.adminAddr, "err", err)
		return nil, "", 1
	}
	// The limit comes first, before anything reads the connection.
	s.adminRefusals = lograte.Default(log, slog.LevelWarn, "admin connection limit reached; closing connections")
	aln = admin.LimitListener(aln, f.adminMaxConns, admin.EvictAfter, func() {
		m.AdminRefused()
		s.adminRefusals.Log("max_connections", f.adminMaxConns)
	})
	aln = admin.NotHTTPListener(aln) // a lock client on the wrong port hears so at once
	if f.adminTLS {
		aln = tls.NewListener(aln, s.tls.Admin())
	}
	h := admin.Handler(admin.Config{Server: srv, Metrics: m.Handler(), Token: s.adminToken, Logger: log,
		Stats: statsOf(srv, m), Addr: f.adminAddr, AllowedHosts: s.adminHosts})
	hs = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: adminHeaderTimeout,
		ReadTimeout:       adminReadTimeout,
		WriteTimeout:      adminWriteTimeout,
		IdleTimeout:       adminIdleTimeout,
		MaxHeaderBytes:    adminMaxHeader,
		ConnContext:       admin.ConnContext, // the limit listener needs to know who is inside a request
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	go func() {
		if err := hs.Serve(aln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin API failed", "err", err)
		}
	}()
	log.Info("admin listening", "addr", aln.Addr().String(), "tls", f.adminTLS, "token", s.adminToken != "",
		"max_connections", f.adminMaxConns)
	return hs, aln.Addr().String(), 0
}

// statsOf reads the dashboard's totals (GET /v1/stats) from the server and
// the metrics' counters.
func statsOf(srv *server.Server, m *metrics.Metrics) func() admin.Stats {
	return func() admin.Stats {
		locks, holders, waiters := srv.Counts()
		t := m.Totals()
		return admin.Stats{Sessions: srv.Sessions(), HeldBack: srv.HeldBack(), Locks: locks, Holders: holders, Waiters: waiters,
			Grants: t.Grants, Expiries: t.Expiries, Kicks: t.Kicks}
	}
}

// reloadEndGrace is how long the exit waits for a reload that is
// finishing: far longer than logging takes, far shorter than a blocked
// read of a FIFO.
const reloadEndGrace = 500 * time.Millisecond

// reloader runs reloads one at a time in a goroutine of their own. A
// SIGHUP during a reload asks for one more after it, once however many
// arrive (the last one reads the newest files).
type reloader struct {
	pending chan struct{}
	running atomic.Bool
}

func newReloader(reload func()) *reloader {
	r := &reloader{pending: make(chan struct{}, 1)}
	go func() {
		for range r.pending {
			r.running.Store(true)
			reload()
			r.running.Store(false)
		}
	}()
	return r
}

// request asks for a reload; it never blocks.
func (r *reloader) request(log *slog.Logger) {
	select {
	case r.pending <- struct{}{}:
	default:
		log.Info("SIGHUP: a reload is already waiting to run; it will read the newest files")
	}
}

// abandon is for the server's exit: a reload still running (its file
// blocks) is left behind, and said so. A reload that is finishing (it
// logs its outcome before it counts as done) gets a moment to end first.
func (r *reloader) abandon(log *slog.Logger) {
	for wait := time.Now().Add(reloadEndGrace); r.running.Load() && time.Now().Before(wait); {
		time.Sleep(5 * time.Millisecond)
	}
	if r.running.Load() {
		log.Error("a reload was still running at shutdown and is abandoned; the configuration in force was kept")
	}
}

// reload re-reads the ACL and TLS files. A bad file is reported and the
// configuration in force stays; sessions are never dropped.
func reload(s *serveSetup, m *metrics.Metrics) {
	if s.acl == nil && s.tls == nil {
		s.log.Info("SIGHUP: no ACL or TLS files to reload")
		return
	}
	var errs []error
	if s.acl != nil {
		if rs, err := s.acl.Reload(); err != nil {
			errs = append(errs, err)
		} else {
			s.log.Info("ACL reloaded", "file", s.acl.Path(), "rules", rs.Len())
		}
	}
	if s.tls != nil {
		if err := s.tls.Reload(); err != nil {
			errs = append(errs, err)
		} else {
			s.log.Info("TLS files reloaded")
		}
	}
	err := errors.Join(errs...)
	if err != nil {
		s.log.Error("reload failed; keeping the previous configuration",
			"err", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	m.Reloaded(err)
}

func shutdown(srv *server.Server, adminSrv *http.Server, drain time.Duration, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	err := srv.Shutdown(ctx)
	if err != nil {
		log.Error("shutdown incomplete", "err", err)
	}
	if adminSrv != nil {
		// /readyz answered 503 during the drain; now the admin API goes too.
		actx, acancel := context.WithTimeout(context.Background(), time.Second)
		defer acancel()
		_ = adminSrv.Shutdown(actx)
	}
	return err
}

// defaultDataDir follows the XDG base directory spec for state:
// $XDG_STATE_HOME/monolock, else ~/.local/state/monolock.
func defaultDataDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "monolock")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".local", "state", "monolock")
}

// newHANode joins the HA cell of the --etcd flags.
func newHANode(f serveFlags, log *slog.Logger) (*ha.Node, error) {
	advertise := f.advertise
	if advertise == "" {
		advertise = f.listen
	}
	var tlsCfg *tls.Config
	if f.etcdCA != "" || f.etcdCert != "" {
		var err error
		if tlsCfg, err = etcdTLS(f.etcdCA, f.etcdCert, f.etcdKey); err != nil {
			return nil, err
		}
	}
	return ha.New(ha.Config{
		Endpoints: strings.Split(f.etcd, ","),
		Prefix:    f.etcdPrefix,
		Advertise: advertise,
		TTL:       f.etcdTTL,
		TLS:       tlsCfg,
		Logger:    log,
		Floor:     f.tokenFloor,
	})
}

// etcdTLS is the client TLS configuration for etcd.
func etcdTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg, err := client.TLSFromFiles(client.TLSFiles{CA: caFile, Cert: certFile, Key: keyFile})
	if err != nil {
		return nil, fmt.Errorf("etcd client TLS (--etcd-ca, --etcd-cert, --etcd-key): %w", err)
	}
	return cfg, nil
}
