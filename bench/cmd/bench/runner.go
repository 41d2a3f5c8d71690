package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"syscall"
	"time"

	"github.com/monolock/monolock/bench/internal/floor"
	"github.com/monolock/monolock/bench/internal/monoserver"
	"github.com/monolock/monolock/bench/internal/peeridle"
	"github.com/monolock/monolock/bench/internal/peers"
	"github.com/monolock/monolock/bench/internal/procstat"
	"github.com/monolock/monolock/bench/internal/report"
	"github.com/monolock/monolock/bench/internal/systems"
	"github.com/monolock/monolock/bench/internal/workload"
	"github.com/monolock/monolock/go/client"
)

// runner runs the workloads of one plan and fills in the results.
type runner struct {
	ctx        context.Context
	plan       plan
	bin, work  string
	beforeBin  string // `monolock serve` of the -before revision, when monolock-before runs
	r          *report.Results
	systems    []string
	clients    []string
	profileDir string
	serverSeq  int

	safetyRuns        int
	safetyClientNames []string
	overlapRuns       int
	built             map[string]error  // driver builds, by directory and command
	certs             *monoserver.Certs // the TLS systems' CA and server certificate, made on first use
}

// tlsCerts makes the CA and server certificate of the TLS systems once
// per run.
func (rn *runner) tlsCerts() (monoserver.Certs, error) {
	if rn.certs != nil {
		return *rn.certs, nil
	}
	c, err := monoserver.MakeCerts(rn.bin, filepath.Join(rn.work, "certs"))
	if err != nil {
		return c, err
	}
	rn.certs = &c
	return c, nil
}

// startMonolock starts a fresh `monolock serve` with its own data dir.
func (rn *runner) startMonolock(extraArgs ...string) (*monoserver.Server, error) {
	return rn.startServer(rn.bin, extraArgs...)
}

// startServer starts a fresh `bin serve` with its own data dir.
func (rn *runner) startServer(bin string, extraArgs ...string) (*monoserver.Server, error) {
	rn.serverSeq++
	dir := filepath.Join(rn.work, fmt.Sprintf("data-%d", rn.serverSeq))
	return monoserver.Start(rn.ctx, bin, dir, extraArgs...)
}

// localServer is a server this run started for one system: `monolock
// serve` or `bench floor`.
type localServer struct {
	Addr string
	PID  int
}

// withSystem opens the named system (monolock and the floor on a fresh
// server process of their own, monolock-before on the -before revision's
// `monolock serve`) and calls f with it, closing it afterwards; srv is nil
// for the peers, which scripts/peers.sh runs.
func (rn *runner) withSystem(name string, o systems.Options, f func(sys systems.System, srv *localServer) error) error {
	var srv *localServer
	switch {
	case systems.Local(name):
		var args []string
		if systems.TLS(name) {
			certs, err := rn.tlsCerts()
			if err != nil {
				return err
			}
			if o.TLS, err = client.TLSFromFiles(client.TLSFiles{CA: certs.CA}); err != nil {
				return err
			}
			args = certs.ServeArgs()
		}
		bin := rn.bin
		if name == systems.MonolockBefore {
			if rn.beforeBin == "" {
				return fmt.Errorf("%s: no binary of the -before revision", name)
			}
			bin = rn.beforeBin
		}
		mono, err := rn.startServer(bin, args...)
		if err != nil {
			return err
		}
		defer mono.Stop()
		srv = &localServer{Addr: mono.Addr, PID: mono.PID()}
	case name == systems.Floor || name == systems.SessionFloor: // one server, both modes
		self, err := os.Executable()
		if err != nil {
			return err
		}
		fl, err := floor.Start(rn.ctx, self)
		if err != nil {
			return err
		}
		defer fl.Stop()
		srv = &localServer{Addr: fl.Addr, PID: fl.PID()}
	}
	addr := ""
	if srv != nil {
		addr = srv.Addr
	}
	sys, err := peers.Open(rn.ctx, name, addr, o)
	if err != nil {
		return fmt.Errorf("open %s: %w", name, err)
	}
	defer sys.Close()
	return f(sys, srv)
}

// profile writes a CPU profile of this process around f when -profile is set.
func (rn *runner) profile(name string, f func()) {
	if rn.profileDir == "" {
		f()
		return
	}
	_ = os.MkdirAll(rn.profileDir, 0o755)
	out, err := os.Create(filepath.Join(rn.profileDir, name+".pprof"))
	if err == nil && pprof.StartCPUProfile(out) == nil {
		defer func() { pprof.StopCPUProfile(); out.Close() }()
	}
	f()
}

func (rn *runner) throughput() error {
	for _, name := range rn.systems {
		for _, w := range rn.plan.workerCounts {
			o := systems.Options{Lease: 10 * time.Second, Pool: w}
			cell := report.ThroughputCell{System: name, Workers: w}
			err := rn.withSystem(name, o, func(sys systems.System, srv *localServer) error {
				pid := serverPID(name, srv)
				s0, c0 := procstat.CPU(pid), procstat.OwnCPU(os.Getpid()) // the server may be our child
				var err error
				rn.profile(fmt.Sprintf("client-throughput-%s-%d", name, w), func() {
					cell.Stats, err = workload.Throughput(rn.ctx, sys, w, rn.plan.throughputFor, name != systems.ZooKeeper)
				})
				if n := float64(cell.Stats.Count); n > 0 && pid > 0 {
					cell.ServerCPUPerOp = float64((procstat.CPU(pid) - s0).Microseconds()) / n
					cell.ClientCPUPerOp = float64((procstat.OwnCPU(os.Getpid()) - c0).Microseconds()) / n
				}
				return err
			})
			if err != nil {
				cell.Err = err.Error()
			}
			log.Printf("throughput %-21s %2d workers: %8.0f cycles/s  p50 %v  p99 %v  errors %d  cpu/op server %.0f µs client %.0f µs %s",
				name, w, cell.Stats.PerSec, cell.Stats.P50, cell.Stats.P99, cell.Stats.Errors, cell.ServerCPUPerOp, cell.ClientCPUPerOp, cell.Err)
			rn.r.Throughput = append(rn.r.Throughput, cell)
		}
	}
	return rn.ctx.Err()
}

func (rn *runner) handoff() error {
	for _, name := range rn.systems {
		if !systems.Handoff(name) {
			continue
		}
		o := systems.Options{Lease: 10 * time.Second, Pool: rn.plan.handoffers}
		cell := report.HandoffCell{System: name, Workers: rn.plan.handoffers}
		err := rn.withSystem(name, o, func(sys systems.System, _ *localServer) error {
			var err error
			rn.profile("client-handoff-"+name, func() {
				cell.Result, err = workload.Handoff(rn.ctx, sys, rn.plan.handoffers, rn.plan.handoffFor, fmt.Sprintf("contended-%d", time.Now().UnixNano()))
			})
			return err
		})
		if err != nil {
			cell.Err = err.Error()
		}
		l := cell.Result.Latency
		log.Printf("handoff    %-9s: %7.0f handoffs/s %7.0f grants/s  p50 %v  p99 %v  wait p99 %v  errors %d %s",
			name, l.PerSec, cell.Result.GrantsPerSec, l.P50, l.P99, cell.Result.Wait.P99, l.Errors, cell.Err)
		rn.r.Handoff = append(rn.r.Handoff, cell)
	}
	return rn.ctx.Err()
}

// held is the held-locks workload: cfg's sessions and claims on a fresh
// `monolock serve --max-sessions 0`, its VmRSS growth per lock and its CPU
// over a quiet window of heartbeats. It runs when monolock-session is
// among the systems.
func (rn *runner) held() error {
	if !slices.Contains(rn.systems, systems.MonolockSession) {
		return nil
	}
	cfg := rn.plan.held.WithDefaults()
	sec := &report.HeldSection{}
	rn.r.Held = sec
	mono, err := rn.startMonolock("--max-sessions", "0")
	if err != nil {
		sec.Err = err.Error()
		return nil
	}
	defer mono.Stop()
	if !workload.SleepCtx(rn.ctx, time.Second) { // let the new process settle before the baseline
		return rn.ctx.Err()
	}
	sec.Result, err = workload.Held(rn.ctx, mono.Addr, mono.PID(), cfg)
	if err != nil {
		sec.Err = err.Error()
	}
	x := sec.Result
	log.Printf("held       %d sessions × %d claims: %d held in %v, VmRSS %.1f → %.1f MiB, %.0f B/lock, %.4f cores over %v, %d lost %s",
		cfg.Sessions, cfg.Claims, x.Held, x.Setup.Round(time.Millisecond), float64(x.RSSBefore)/(1<<20), float64(x.RSSAfter)/(1<<20),
		x.BytesPerLock, x.CPUCores, x.Window.Round(time.Millisecond), x.Lost, sec.Err)
	return rn.ctx.Err()
}

// peerPorts are the loopback ports scripts/peers.sh starts the peers on.
var peerPorts = map[string]int{systems.Redis: 16379, systems.Etcd: 12379, systems.ZooKeeper: 12181, systems.Postgres: 15432}

// serverPID is the process serving name, 0 if it cannot be found.
func serverPID(name string, srv *localServer) int {
	if srv != nil {
		return srv.PID
	}
	pid, err := procstat.ListenerPID(peerPorts[name])
	if err != nil {
		return 0
	}
	return pid
}

// holdCommand runs this same binary as a lock holder (see holdMain).
func (rn *runner) holdCommand(monoAddr string) workload.HoldCommand {
	self, _ := os.Executable()
	return func(system, name string, lease time.Duration) *exec.Cmd {
		cmd := exec.Command(self, "hold", "-system", system, "-name", name, "-lease", lease.String(), "-monolock", monoAddr)
		cmd.Stderr = os.Stderr
		return cmd
	}
}

func (rn *runner) dead() error {
	for _, name := range rn.systems {
		if systems.ThroughputOnly(name) {
			continue
		}
		o := systems.Options{Lease: rn.plan.deadLease, Pool: 4}
		cell := report.DeadCell{System: name}
		err := rn.withSystem(name, o, func(sys systems.System, srv *localServer) error {
			addr := ""
			if srv != nil {
				addr = srv.Addr
			}
			cell.Result = workload.DeadHolder(rn.ctx, sys, rn.holdCommand(addr), rn.plan.deadLease, rn.plan.deadTrials)
			return nil
		})
		if err != nil {
			cell.Result = workload.DeadResult{Lease: rn.plan.deadLease, Trials: rn.plan.deadTrials, Missed: rn.plan.deadTrials, FirstErr: err.Error()}
		}
		log.Printf("dead       %-9s: lease %v samples %v missed %d %s", name, cell.Result.Lease, cell.Result.Samples, cell.Result.Missed, cell.Result.FirstErr)
		rn.r.Dead = append(rn.r.Dead, cell)
	}
	return rn.ctx.Err()
}

func (rn *runner) idle() error {
	for _, name := range rn.systems {
		if systems.ThroughputOnly(name) {
			continue
		}
		counts := rn.plan.idleCounts[name]
		if name == systems.Monolock {
			counts = rn.fitFileLimit(counts)
		}
		for _, n := range counts {
			cell := report.IdleCell{System: name}
			if name == systems.Monolock && n > rn.maxSessions() {
				cell.Result.Holders = n
				cell.Err = fmt.Sprintf("not run: one connection is one file descriptor, and this machine caps every process at %d (RLIMIT_NOFILE hard limit; raising it needs CAP_SYS_RESOURCE, which this sandbox does not grant)", fileLimit())
				log.Printf("idle       %-9s %6d holders: %s", name, n, cell.Err)
				rn.r.Idle = append(rn.r.Idle, cell)
				continue
			}
			err := rn.idleCell(name, n, &cell.Result)
			if err != nil {
				cell.Err = err.Error()
			}
			x := cell.Result
			log.Printf("idle       %-9s %6d holders: %d up in %v, %.0f B/holder, %.3f cores, %d refreshes, %d lost %s",
				name, n, x.Established, x.Setup.Round(time.Millisecond), x.BytesPerHolder, x.CPUCores, x.Refreshes, x.Lost, cell.Err)
			rn.r.Idle = append(rn.r.Idle, cell)
			if rn.ctx.Err() != nil {
				return rn.ctx.Err()
			}
		}
	}
	return nil
}

// fileLimit is this process's RLIMIT_NOFILE after raiseFileLimit; the
// monolock server inherits it.
func fileLimit() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 1 << 20
	}
	return int(lim.Cur)
}

// maxSessions is how many idle connections fit under the file limit of
// both the server and this load generator, with room for their other files.
func (rn *runner) maxSessions() int { return fileLimit() - 1000 }

// fitFileLimit adds, when some counts exceed what the file limit allows,
// the largest round count that fits, so the run still measures as close
// to the asked size as the machine permits.
func (rn *runner) fitFileLimit(counts []int) []int {
	limit := rn.maxSessions()
	out := slices.Clone(counts)
	if slices.Max(counts) > limit && limit > 0 {
		fit := limit / 1000 * 1000
		if !slices.Contains(out, fit) {
			out = append(out, fit)
		}
	}
	slices.Sort(out)
	return out
}

func (rn *runner) idleCell(name string, n int, res *workload.IdleResult) error {
	lease, window := rn.plan.idleLease, rn.plan.idleWindow
	var err error
	switch name {
	case systems.Monolock:
		// A fresh server per size, so each starts from the same baseline.
		mono, err := rn.startMonolock()
		if err != nil {
			return err
		}
		defer mono.Stop()
		time.Sleep(time.Second) // let the new process settle before the baseline
		*res, err = workload.MeasureIdle(rn.ctx, mono.PID(), n, lease, window, workload.IdleMonolock(mono.Addr))
		return err
	case systems.Redis, systems.Etcd, systems.ZooKeeper, systems.Postgres:
		pid, perr := procstat.ListenerPID(peerPorts[name])
		if perr != nil {
			return perr
		}
		err = rn.withSystem(name, systems.Options{Lease: lease, Pool: 16}, func(sys systems.System, _ *localServer) error {
			var setup func(ctx context.Context, n int, lease time.Duration) (*workload.Holders, error)
			switch name {
			case systems.Redis:
				setup = peeridle.Redis(peers.RedisClient(sys))
			case systems.Etcd:
				setup = peeridle.Etcd(peers.EtcdClient(sys))
			case systems.ZooKeeper:
				setup = peeridle.ZooKeeper(systems.ZooKeeperAddr)
			case systems.Postgres:
				setup = peeridle.Postgres(systems.PostgresAddr)
			}
			var err error
			*res, err = workload.MeasureIdle(rn.ctx, pid, n, lease, window, setup)
			return err
		})
	}
	return err
}
