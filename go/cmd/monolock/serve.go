package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/monolock/monolock/go/internal/server"
)

// shutdownGrace bounds how long a graceful stop waits for sessions to take
// their ERROR 0x01 before the remaining connections are cut.
const shutdownGrace = 10 * time.Second

// serveMain runs the lock server until SIGTERM or SIGINT.
func serveMain(args []string) int {
	fs := flag.NewFlagSet("monolock serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported in one line below
	listen := fs.String("listen", "127.0.0.1:7117", "TCP `address` to accept lock sessions on")
	dataDir := fs.String("data-dir", defaultDataDir(), "`directory` for the fencing token high-water mark (created if missing)")
	handshake := fs.Duration("handshake-timeout", server.DefaultHandshakeTimeout,
		"close a connection that has not sent its ACQUIRE within this `duration`")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stdout)
			fmt.Fprintln(os.Stdout, "usage: monolock serve [flags]")
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(os.Stderr, "monolock serve: %v (see monolock serve -h)\n", err)
		return 2
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(os.Stderr, "monolock serve: unexpected argument %q (see monolock serve -h)\n", fs.Arg(0))
		return 2
	case *dataDir == "":
		fmt.Fprintln(os.Stderr, "monolock serve: no --data-dir given and no home directory to default to")
		return 2
	case *handshake <= 0:
		fmt.Fprintf(os.Stderr, "monolock serve: --handshake-timeout must be positive, got %v\n", *handshake)
		return 2
	}

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	srv, err := server.New(server.Config{DataDir: *dataDir, HandshakeTimeout: *handshake, Logger: log})
	if err != nil {
		log.Error("cannot start", "err", err)
		return 1
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Error("cannot listen", "err", err)
		return 1
	}
	// Tests and tools read the bound address from this exact line.
	log.Info("listening", "addr", ln.Addr().String())
	log.Info("token store", "data_dir", *dataDir)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	select {
	case err := <-served:
		log.Error("serve failed", "err", err)
		shutdown(srv, log)
		return 1
	case <-ctx.Done():
	}
	log.Info("shutting down")
	code := 0
	if err := shutdown(srv, log); err != nil {
		code = 1
	}
	<-served
	log.Info("stopped")
	return code
}

func shutdown(srv *server.Server, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	err := srv.Shutdown(ctx)
	if err != nil {
		log.Error("shutdown incomplete", "err", err)
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
