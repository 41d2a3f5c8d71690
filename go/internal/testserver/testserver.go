// Package testserver runs the real lock server inside the test's own
// process, on a loopback port, for tests of the packages built on it
// (clients, admin API). Tests of the command use internal/testbin instead.
package testserver

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/monolock/monolock/go/internal/server"
)

// Server is a real server serving on Addr.
type Server struct {
	*server.Server
	Addr string

	stopWait time.Duration
	served   <-chan error
	once     sync.Once
	err      error
}

// Start runs a server with cfg (a fresh data directory when cfg has none)
// on 127.0.0.1:0. When the test ends it is stopped as by Stop, whose error
// is then ignored: a test that cares checks Stop itself. stopWait bounds the
// graceful shutdown.
func Start(tb testing.TB, cfg server.Config, stopWait time.Duration) *Server {
	tb.Helper()
	return StartOn(tb, cfg, stopWait, nil)
}

// StartOn is Start serving through wrap(listener) when wrap is not nil
// (TLS: server.NewTLSListener); Addr stays the TCP address.
func StartOn(tb testing.TB, cfg server.Config, stopWait time.Duration, wrap func(net.Listener) net.Listener) *Server {
	tb.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = tb.TempDir()
	}
	srv, err := server.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = srv.Shutdown(context.Background()) // frees the data directory
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	if wrap != nil {
		ln = wrap(ln)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	s := &Server{Server: srv, Addr: addr, stopWait: stopWait, served: served}
	tb.Cleanup(func() { _ = s.Stop() })
	return s
}

// Stop shuts the server down gracefully, as a SIGTERM would, and waits for
// Serve to return. Only the first call does so; every call returns the
// first error of Shutdown or Serve.
func (s *Server) Stop() error {
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.stopWait)
		defer cancel()
		s.err = s.Shutdown(ctx)
		if err := <-s.served; s.err == nil {
			s.err = err
		}
	})
	return s.err
}
