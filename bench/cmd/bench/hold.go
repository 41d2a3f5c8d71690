package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/monolock/monolock/bench/internal/peers"
	"github.com/monolock/monolock/bench/internal/systems"
)

// holdMain is the dead-holder workload's holder process: it acquires one
// lock, keeps it alive the way its recipe does, prints "held" and waits to
// be frozen and killed. It exits by itself after 5 minutes at the latest.
func holdMain(args []string) int {
	fs := flag.NewFlagSet("bench hold", flag.ContinueOnError)
	system := fs.String("system", "", "system to hold the lock on")
	name := fs.String("name", "", "lock name")
	lease := fs.Duration("lease", 2*time.Second, "lease / TTL")
	mono := fs.String("monolock", "", "monolock server address")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sys, err := peers.Open(ctx, *system, *mono, systems.Options{Lease: *lease, KeepAlive: true, Pool: 1})
	if err != nil {
		fmt.Fprintln(os.Stderr, "hold:", err)
		return 1
	}
	w, err := sys.Worker(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hold:", err)
		return 1
	}
	if _, err := w.Acquire(ctx, *name); err != nil {
		fmt.Fprintln(os.Stderr, "hold:", err)
		return 1
	}
	fmt.Println("held")
	<-ctx.Done()
	return 0
}
