package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/monolock/monolock/go/client"
	"github.com/monolock/monolock/go/internal/flagtype"
	"github.com/monolock/monolock/go/internal/runcmd"
	"github.com/monolock/monolock/go/internal/termtext"
)

// Exit statuses of monolock leader.
const (
	leaderExitLeading  = 0
	leaderExitNone     = 1
	leaderExitUsage    = 2
	leaderExitHeldBack = 3
	leaderExitUnknown  = 4
)

// electMain is `monolock elect`: monolock run with a value.
func electMain(args []string) int { return runcmd.MainElect(args, os.Stdout, os.Stderr) }

// watchFlags are the flags observe and leader share.
type watchFlags struct {
	servers  []string
	lease    time.Duration
	json     bool
	tls      client.TLSFiles
	tlsOn    bool
	timeout  time.Duration
	name     string
	serverFl string
}

func parseWatchFlags(cmd string, args []string, stderr io.Writer) (*watchFlags, error) {
	f := &watchFlags{}
	fset := flag.NewFlagSet("monolock "+cmd, flag.ContinueOnError)
	fset.SetOutput(stderr)
	fset.StringVar(&f.serverFl, "server", envOr("MONOLOCK_SERVER", client.DefaultServer), "server `ADDR`s, comma-separated (default: $MONOLOCK_SERVER, else "+client.DefaultServer+")")
	flagtype.DurationVar(fset, &f.lease, "lease", client.DefaultLease, "the watch's lease `D`: with no answer for 0.8 x D the state is unknown")
	fset.BoolVar(&f.json, "json", false, "one JSON object per line")
	flagtype.DurationVar(fset, &f.timeout, "timeout", 10*time.Second, "give up reaching a server after `D`")
	fset.BoolVar(&f.tlsOn, "tls", false, "connect with TLS (implied by the other --tls-* flags)")
	fset.StringVar(&f.tls.CA, "tls-ca", "", "PEM `FILE` of CA certificates that sign the server's certificate")
	fset.StringVar(&f.tls.Cert, "tls-cert", "", "PEM `FILE` with the client certificate, for mutual TLS")
	fset.StringVar(&f.tls.Key, "tls-key", "", "PEM `FILE` with the client certificate's key")
	fset.StringVar(&f.tls.ServerName, "tls-server-name", "", "`NAME` expected in the server's certificate")
	fset.Usage = func() {
		fmt.Fprintf(stderr, "usage: monolock %s [flags] NAME\n", cmd)
		fset.PrintDefaults()
	}
	if err := fset.Parse(args); err != nil {
		return nil, err
	}
	if fset.NArg() != 1 {
		return nil, errors.New("want exactly one lock NAME")
	}
	f.name = fset.Arg(0)
	for _, s := range strings.Split(f.serverFl, ",") {
		if s = strings.TrimSpace(s); s != "" {
			f.servers = append(f.servers, s)
		}
	}
	return f, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func (f *watchFlags) client() (*client.Client, error) {
	opts := []client.Option{client.WithServers(f.servers...), client.WithLease(f.lease)}
	if f.tlsOn || f.tls.CA != "" || f.tls.Cert != "" || f.tls.ServerName != "" {
		cfg, err := client.TLSFromFiles(f.tls)
		if err != nil {
			return nil, err
		}
		opts = append(opts, client.WithTLS(cfg))
	}
	return client.New(opts...)
}

// observeMain is `monolock observe NAME`: one line per change of NAME's
// leadership, until interrupted.
func observeMain(args []string) int {
	f, err := parseWatchFlags("observe", args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "monolock observe: %s\n", termtext.Line(err.Error()))
		return leaderExitUsage
	}
	c, err := f.client()
	if err != nil {
		fmt.Fprintf(os.Stderr, "monolock observe: %s\n", termtext.Line(err.Error()))
		return leaderExitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// --timeout bounds reaching a server, not the watch that follows.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	giveUp := time.AfterFunc(f.timeout, cancel)
	obs, err := c.Observe(ctx, f.name)
	giveUp.Stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "monolock observe: %s\n", termtext.Line(err.Error()))
		return leaderExitUnknown
	}
	for o := range obs {
		printObservation(os.Stdout, o, f.json)
	}
	return 0
}

// leaderMain is `monolock leader NAME`: print who leads, and say by the
// exit status whether anyone does.
func leaderMain(args []string) int {
	f, err := parseWatchFlags("leader", args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "monolock leader: %s\n", termtext.Line(err.Error()))
		return leaderExitUsage
	}
	c, err := f.client()
	if err != nil {
		fmt.Fprintf(os.Stderr, "monolock leader: %s\n", termtext.Line(err.Error()))
		return leaderExitUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	o, err := c.Leader(ctx, f.name)
	if err != nil {
		fmt.Fprintf(os.Stderr, "monolock leader: %s\n", termtext.Line(err.Error()))
		return leaderExitUnknown
	}
	if f.json {
		printObservation(os.Stdout, o, true)
	} else if o.State == client.Leading {
		fmt.Println(string(o.Value))
	} else {
		printObservation(os.Stderr, o, false)
	}
	switch o.State {
	case client.Leading:
		return leaderExitLeading
	case client.NoLeader:
		return leaderExitNone
	case client.LeaderHeldBack:
		return leaderExitHeldBack
	}
	return leaderExitUnknown
}

// observationJSON is one line of --json.
type observationJSON struct {
	Time       time.Time `json:"time"`
	State      string    `json:"state"`
	Token      uint64    `json:"token,omitempty"`
	Value      string    `json:"value,omitempty"`
	Identity   string    `json:"identity,omitempty"`
	UntilMS    int64     `json:"held_back_ms,omitempty"`
	Candidates int       `json:"candidates"`
}

func printObservation(w io.Writer, o client.Observation, asJSON bool) {
	now := time.Now()
	if asJSON {
		j := observationJSON{Time: now.UTC(), State: o.State.String(), Token: o.Token, Value: string(o.Value),
			Identity: o.Identity, Candidates: o.Candidates}
		if !o.Until.IsZero() {
			j.UntilMS = max(o.Until.Sub(now).Milliseconds(), 0)
		}
		b, _ := json.Marshal(j)
		fmt.Fprintln(w, string(b))
		return
	}
	line := now.Format("15:04:05.000") + " " + o.State.String()
	switch o.State {
	case client.Leading:
		line += fmt.Sprintf(" token=%d value=%q identity=%s candidates=%d", o.Token, o.Value, o.Identity, o.Candidates)
	case client.LeaderHeldBack:
		line += fmt.Sprintf(" for %v", o.Until.Sub(now).Round(time.Millisecond))
		if o.Token != 0 {
			line += fmt.Sprintf(" token=%d value=%q (its connection is gone; it may still act)", o.Token, o.Value)
		}
	case client.NoLeader:
		line += fmt.Sprintf(" candidates=%d", o.Candidates)
	}
	fmt.Fprintln(w, termtext.Line(line))
}
