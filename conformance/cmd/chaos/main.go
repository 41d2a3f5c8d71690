// Command chaos runs workers of every client against a local monolock cell
// (one server, or an HA cell on etcd) while it injects faults, and exits 1
// if any promise broke. See docs/chaos.md.
//
//	cd conformance && go run ./cmd/chaos -mode both -duration 10m
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/monolock/monolock/conformance/chaos"
	"github.com/monolock/monolock/conformance/runner"
	"github.com/monolock/monolock/go/testkit/cell"
)

func main() {
	var (
		mode     = flag.String("mode", "both", "`cell` to run: single (one server), ha (3 servers on 3 etcd members) or both (the duration is split)")
		duration = flag.Duration("duration", 2*time.Minute, "how long the faults run, in all")
		lease    = flag.Duration("lease", 2*time.Second, "every worker's lease")
		ttl      = flag.Duration("etcd-ttl", 2*time.Second, "the HA cell's etcd TTL")
		clients  = flag.String("clients", "", "comma-separated client `names` from conformance/manifest.json, a name repeated for more workers (default: every client once)")
		locks    = flag.String("locks", chaos.DefaultLocks, "comma-separated lock `kinds` the workers are dealt to in turn: exclusive, shared (a third of the claims exclusive), semaphore:N (N permits, a third of the claims exclusive), election (candidates with values that also watch)")
		pauses   = flag.Bool("pauses", true, "also stop holders' processes (SIGSTOP); the overlaps they cause are reported apart")
		sessions = flag.Bool("sessions", true, "put every second worker's claims on a session (protocol version 4) when its driver has the sessions capability, beside the others' single claims")
		seed     = flag.Uint64("seed", 0, "random seed for faults and hold times (0: from the clock; printed)")
		noBuild  = flag.Bool("no-build", false, "skip building the drivers")
		faults   = flag.String("faults", "", "comma-separated fault `kinds` to inject (default: all that apply; see docs/chaos.md)")
		compare  = flag.Int("compare-etcd", 0, "after the HA run, measure `N` etcd raft leader elections and N handovers of etcd's election recipe, for the failover row of docs/benchmarks.md")
	)
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("chaos: ")
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	root, err := runner.FindRoot(".")
	if err != nil {
		log.Fatal(err)
	}
	specs, err := pickClients(root, *clients)
	if err != nil {
		log.Fatal(err)
	}
	lockList, err := chaos.ParseLocks(*locks)
	if err != nil {
		log.Fatalf("-locks: %v", err)
	}
	if !*noBuild {
		built := map[string]bool{}
		for _, c := range specs {
			key := c.Dir + " " + strings.Join(c.Build, " ")
			if built[key] || len(c.Build) == 0 {
				continue
			}
			built[key] = true
			log.Printf("building %s", c.Name)
			if err := runner.BuildClient(ctx, root, c); err != nil {
				log.Fatal(err)
			}
		}
	}
	tmp, err := os.MkdirTemp("", "monolock-chaos-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	bin, err := runner.BuildServer(ctx, root)
	if err != nil {
		log.Fatal(err)
	}

	var modes []string
	switch *mode {
	case "single", "ha":
		modes = []string{*mode}
	case "both":
		modes = []string{"single", "ha"}
	default:
		log.Fatalf("-mode %q: want single, ha or both", *mode)
	}
	failed := false
	for i, m := range modes {
		o := cell.Options{Bin: bin, Dir: filepath.Join(tmp, m), Servers: 1, EtcdTTL: *ttl, Prefix: "/monolock/chaos/"}
		if m == "ha" {
			o.Servers, o.Etcd = 3, 3
		}
		c, err := chaos.StartCell(ctx, o)
		if err != nil {
			log.Fatal(err)
		}
		rep, err := chaos.Run(ctx, chaos.Config{
			Root: root, Clients: specs, Locks: lockList, Cell: c, Lease: *lease, EtcdTTL: *ttl,
			Duration: *duration / time.Duration(len(modes)), Pauses: *pauses, Sessions: *sessions, Seed: *seed + uint64(i), Log: os.Stdout,
			Faults: splitList(*faults),
		})
		if err == nil && m == "ha" && *compare > 0 {
			compareEtcd(ctx, c, *compare, *ttl)
		}
		c.Close()
		if err != nil {
			log.Fatal(err)
		}
		rep.Write(os.Stdout)
		failed = failed || len(rep.Violations()) > 0
	}
	if failed {
		fmt.Println("chaos: FAILED")
		os.Exit(1)
	}
	fmt.Println("chaos: ok")
}

// compareEtcd prints etcd's own failover times on the same machine: its
// raft leader election after a kill -9 of the leader member, and its
// election recipe's handover after a campaigner vanishes.
func compareEtcd(ctx context.Context, c *chaos.Cell, n int, ttl time.Duration) {
	for range n {
		if d, err := c.Etcd().Elect(ctx); err != nil {
			log.Printf("etcd raft election: %v", err)
		} else {
			fmt.Printf("etcd raft leader killed: new leader after %.2f s\n", d.Seconds())
		}
		if d, err := c.Etcd().RecipeHandover(ctx, ttl); err != nil {
			log.Printf("etcd election recipe: %v", err)
		} else {
			fmt.Printf("etcd election recipe, TTL %v: the other campaigner won %.2f s after the leader vanished\n", ttl, d.Seconds())
		}
	}
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// pickClients returns the manifest entries named in list, in its order and
// with repeats, or every entry once.
func pickClients(root, list string) ([]runner.Client, error) {
	m, err := runner.LoadManifest(filepath.Join(root, "conformance", "manifest.json"))
	if err != nil {
		return nil, err
	}
	if list == "" {
		return m.Clients, nil
	}
	byName := map[string]runner.Client{}
	for _, c := range m.Clients {
		byName[c.Name] = c
	}
	var out []runner.Client
	for _, n := range strings.Split(list, ",") {
		c, ok := byName[strings.TrimSpace(n)]
		if !ok {
			return nil, fmt.Errorf("-clients: no client %q in conformance/manifest.json", n)
		}
		out = append(out, c)
	}
	return out, nil
}
