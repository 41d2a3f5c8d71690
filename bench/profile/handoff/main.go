// Command handoff measures the contended handoff of bench's workload 2 (16
// workers, one name, acquire then release) for several monolock server
// binaries and server environments, and PostgreSQL's in the same session:
//
//	go run ./profile/handoff -bins /tmp/monolock.old,/tmp/monolock.new -rounds 5
//
// (from bench/, with the peers running: `go run ./cmd/bench -workloads
// handoff -systems postgres -keep-peers` starts them). Every round runs every
// cell once, in an order that alternates between rounds, so that load from
// other work on the machine falls on all of them; the report gives each
// cell's median p50 and p99 over the rounds and their ratio to PostgreSQL's.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/monolock/monolock/bench/internal/monoserver"
	"github.com/monolock/monolock/bench/internal/peers"
	"github.com/monolock/monolock/bench/internal/procstat"
	"github.com/monolock/monolock/bench/internal/rawclient"
	"github.com/monolock/monolock/bench/internal/systems"
	"github.com/monolock/monolock/bench/internal/workload"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// cell is one configuration measured every round.
type cell struct {
	name string
	run  func(ctx context.Context) (workload.HandoffResult, error)
}

func main() {
	bins := flag.String("bins", "../bin/monolock", "comma-separated server binaries")
	envs := flag.String("server-env", "", "semicolon-separated server environments to try with every binary, each a space-separated list of VAR=value (empty: the inherited one)")
	rounds := flag.Int("rounds", 3, "rounds over every cell")
	workers := flag.Int("workers", 16, "workers contending for the one name")
	d := flag.Duration("for", 5*time.Second, "duration of each cell")
	raw := flag.Bool("raw", false, "also measure every monolock cell with a raw client (dial, ACQUIRE, read WAITING and ACQUIRED, half-close, read to the close; no heartbeats)")
	pg := flag.Bool("postgres", true, "measure PostgreSQL's handoff too (at "+systems.PostgresAddr+")")
	flag.Parse()
	ctx := context.Background()
	work, err := os.MkdirTemp("", "handoff-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(work)

	o := systems.Options{Lease: 10 * time.Second, Pool: *workers}
	var cells []cell
	clients := []bool{false}
	if *raw {
		clients = append(clients, true)
	}
	for _, bin := range strings.Split(*bins, ",") {
		for _, env := range strings.Split(*envs, ";") {
			for _, isRaw := range clients {
				name := strings.TrimSpace(filepath.Base(bin) + " " + env)
				if isRaw {
					name += " (raw client)"
				}
				cells = append(cells, cell{
					name: name,
					run: func(ctx context.Context) (workload.HandoffResult, error) {
						// A fresh data directory: a used one makes the server
						// wait out the leases of its last run first.
						dir, err := os.MkdirTemp(work, "data-")
						if err != nil {
							return workload.HandoffResult{}, err
						}
						srv, err := startWithEnv(ctx, bin, dir, strings.Fields(env))
						if err != nil {
							return workload.HandoffResult{}, err
						}
						defer srv.Stop()
						var sys systems.System = rawSystem{srv.Addr}
						if !isRaw {
							sys, _ = systems.OpenMonolock(srv.Addr, o)
						}
						return handoff(ctx, sys, srv.PID(), *workers, *d, "handoff")
					},
				})
			}
		}
	}
	if *pg {
		cells = append(cells, cell{name: "postgres", run: func(ctx context.Context) (workload.HandoffResult, error) {
			sys, err := peers.OpenPostgres(ctx, systems.PostgresAddr, o)
			if err != nil {
				return workload.HandoffResult{}, err
			}
			defer sys.Close()
			port, err := netip.ParseAddrPort(systems.PostgresAddr)
			if err != nil {
				return workload.HandoffResult{}, err
			}
			pid, err := procstat.ListenerPID(int(port.Port()))
			if err != nil {
				return workload.HandoffResult{}, err
			}
			return handoff(ctx, sys, pid, *workers, *d, fmt.Sprint(time.Now().UnixNano()))
		}})
	}

	p50 := make(map[string][]time.Duration)
	p99 := make(map[string][]time.Duration)
	for r := range *rounds {
		order := slices.Clone(cells)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, c := range order {
			res, err := c.run(ctx)
			if err != nil {
				log.Fatalf("%s: %v", c.name, err)
			}
			log.Printf("round %d %-40s %6.0f handoffs/s  p50 %v  p99 %v", r+1, c.name, res.Latency.PerSec, res.Latency.P50, res.Latency.P99)
			p50[c.name] = append(p50[c.name], res.Latency.P50)
			p99[c.name] = append(p99[c.name], res.Latency.P99)
		}
	}
	fmt.Printf("\n%-40s %10s %10s %8s %8s\n", "cell", "p50", "p99", "p50/pg", "p99/pg")
	for _, c := range cells {
		a, b := median(p50[c.name]), median(p99[c.name])
		ra, rb := "", ""
		if *pg {
			ra = fmt.Sprintf("%.2f×", float64(a)/float64(median(p50["postgres"])))
			rb = fmt.Sprintf("%.2f×", float64(b)/float64(median(p99["postgres"])))
		}
		fmt.Printf("%-40s %10v %10v %8s %8s\n", c.name, a.Round(time.Microsecond), b.Round(time.Microsecond), ra, rb)
	}
}

// handoff runs workload 2 on sys and logs the CPU per handoff of the
// server (the process tree at serverPID) and of this process.
func handoff(ctx context.Context, sys systems.System, serverPID, workers int, d time.Duration, name string) (workload.HandoffResult, error) {
	server0, self0 := procstat.CPU(serverPID), procstat.OwnCPU(os.Getpid())
	res, err := workload.Handoff(ctx, sys, workers, d, name)
	if n := time.Duration(res.Latency.Count); n > 0 {
		log.Printf("   CPU per handoff: server %v, client %v", (procstat.CPU(serverPID)-server0)/n, (procstat.OwnCPU(os.Getpid())-self0)/n)
	}
	return res, err
}

// startWithEnv starts bin serve with env added to this process's
// environment (which the server inherits).
func startWithEnv(ctx context.Context, bin, dir string, env []string) (*monoserver.Server, error) {
	var undo []func()
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		old, had := os.LookupEnv(k)
		os.Setenv(k, v)
		undo = append(undo, func() {
			if had {
				os.Setenv(k, old)
			} else {
				os.Unsetenv(k)
			}
		})
	}
	defer func() {
		for _, u := range undo {
			u()
		}
	}()
	return monoserver.Start(ctx, bin, dir)
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// rawSystem is the least client a waiter can be: one connection per claim,
// no heartbeat (the lease outlasts every cell), no goroutine of its own.
type rawSystem struct{ addr string }

func (r rawSystem) Name() string                                   { return "raw" }
func (r rawSystem) Close() error                                   { return nil }
func (r rawSystem) Worker(context.Context) (systems.Worker, error) { return r, nil }

func (r rawSystem) Acquire(ctx context.Context, name string) (systems.Held, error) {
	frame, err := protocol.AppendAcquire(nil, name, 60_000)
	if err != nil {
		return nil, err
	}
	nc, err := (&net.Dialer{KeepAlive: -1}).Dial("tcp", r.addr)
	if err != nil {
		return nil, err
	}
	h := &rawHeld{}
	h.Reset(nc.(*net.TCPConn))
	if _, err := h.Acquire(frame, rawclient.AnyWaiting); err != nil {
		h.TCP.Close()
		return nil, err
	}
	return h, nil
}

type rawHeld struct{ rawclient.Conn }

func (h *rawHeld) Release() error {
	defer h.TCP.Close()
	return h.Conn.Release()
}
