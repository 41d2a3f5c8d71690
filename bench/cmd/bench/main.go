// Command bench measures monolock beside Redis, etcd, PostgreSQL and
// ZooKeeper on loopback and regenerates docs/benchmarks.md with its charts.
//
//	go run ./cmd/bench -out ../docs            # full run, under 20 minutes
//	go run ./cmd/bench -quick -out /tmp/docs   # every workload briefly
//	go run ./cmd/bench -workloads safety -out ../docs   # one section, merged into the last full run
//	go run ./cmd/bench -workloads overlap -out ../docs  # the same for section 8
//	go run ./cmd/bench -workloads shared,rwhandoff,semaphore -systems monolock,postgres -out ../docs  # and for section 9
//	go run ./cmd/bench -workloads election -systems monolock,etcd -out ../docs  # and for section 10
//	go run ./cmd/bench -workloads held -systems monolock-session -out ../docs  # and for section 11
//
// It installs and starts the peers with scripts/peers.sh (Debian packages),
// builds monolock from ../go, runs every workload for a bounded time and
// stops everything it started.
//
// The same binary serves as its own helper processes: `bench hold` (a
// dead-holder workload's holder), `bench floor` (the server of the tcp and
// session floors, package floor) and `bench append` (the overlap
// workload's held command, package overlap).
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/monolock/monolock/bench/internal/charts"
	"github.com/monolock/monolock/bench/internal/floor"
	"github.com/monolock/monolock/bench/internal/monoserver"
	"github.com/monolock/monolock/bench/internal/overlap"
	"github.com/monolock/monolock/bench/internal/report"
	"github.com/monolock/monolock/bench/internal/systems"
	"github.com/monolock/monolock/bench/internal/workload"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "hold" {
		os.Exit(holdMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "floor" {
		os.Exit(floor.Main(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "append" {
		os.Exit(overlap.AppendMain(os.Args[2:]))
	}
	os.Exit(benchMain())
}

// plan is what one run measures and for how long.
type plan struct {
	throughputFor time.Duration
	workerCounts  []int
	handoffFor    time.Duration
	handoffers    int
	idleCounts    map[string][]int // holders per system
	idleLease     time.Duration
	idleWindow    time.Duration
	deadLease     time.Duration
	deadTrials    int
	clientFor     time.Duration // each workload-5 cell
	safetyLease   time.Duration // workload 6: lease / TTL / session timeout of every recipe
	safetyRuns    int           // workload 6: runs per recipe and fault
	failoverRuns  int           // workload 7: leader kills, and etcd elections of each kind
	overlapLease  time.Duration // workload 8: lease of monolock run, session TTL of etcdctl lock
	overlapRuns   int           // workload 8: runs per tool, command variant and fault
	sharedFor     time.Duration // workload 9: each cell
	sharedWorkers []int         // workload 9: workers cycling one shared name
	rwReaders     []int         // workload 9: readers before the waiting writer
	rwSettle      time.Duration // workload 9: the writer's time to queue
	semWorkers    int           // workload 9: workers on the semaphore
	semLimit      int           // workload 9: its permits
	semHold       time.Duration // workload 9: each permit's hold
	// Workload 10: leader election.
	electionLease     time.Duration // every recipe's lease / TTL
	electionRuns      int           // runs per system of the resign, crash and split scenarios
	electionParallel  int           // crash and split runs of one system at once
	electionFollowers int           // observers of the resign, crash and watch scenarios
	electionProclaims int           // values proclaimed per system, over electionRounds runs
	electionRounds    int
	electionPace      time.Duration // between two Proclaim calls' starts
	// Held locks: sessions × claims held on one server, a quiet window.
	held workload.HeldConfig
}

var fullPlan = plan{
	throughputFor: 10 * time.Second,
	workerCounts:  []int{1, 16, 64},
	handoffFor:    15 * time.Second,
	handoffers:    16,
	idleCounts: map[string][]int{
		// 100k does not fit under this machine's file limit; the sizes
		// below it (and the largest that fits, added at run time) give
		// the straight line the targets extrapolate to 100k.
		systems.Monolock: {2000, 5000, 10000, 100000},
		systems.Redis:    {10000, 50000, 100000},
		// Each etcd holder is a lease (a raft write to create), each
		// ZooKeeper holder a session, each PostgreSQL holder a backend
		// process: these are measured at sizes they can set up in time.
		systems.Etcd:      {10000},
		systems.ZooKeeper: {10000},
		systems.Postgres:  {1000},
	},
	idleLease:  10 * time.Second,
	idleWindow: 10 * time.Second,
	deadLease:  2 * time.Second,
	deadTrials: 5,
	clientFor:  5 * time.Second,
	// Workload 6's runs of one recipe run concurrently: more runs cost
	// little time, and 5 keep the whole section near 4 minutes.
	safetyLease:  2 * time.Second,
	safetyRuns:   5,
	failoverRuns: 5,
	// Workload 8's runs of one tool and command run concurrently, as
	// workload 6's: the six batches take about two minutes.
	overlapLease:  2 * time.Second,
	overlapRuns:   5,
	sharedFor:     5 * time.Second,
	sharedWorkers: []int{1, 16},
	rwReaders:     []int{4, 16},
	rwSettle:      2 * time.Millisecond,
	semWorkers:    16,
	semLimit:      4,
	semHold:       200 * time.Microsecond,
	// Workload 10's crash and split runs wait out a 2 s lease each, so
	// ten of a system run at once: the section takes about a minute.
	electionLease:     2 * time.Second,
	electionRuns:      20,
	electionParallel:  10,
	electionFollowers: 8,
	electionProclaims: 200,
	electionRounds:    4,
	electionPace:      10 * time.Millisecond,
	// 100 sessions × 1,000 claims: the 100k held locks. The
	// window starts after a heartbeat period and one second more.
	held: workload.HeldConfig{Sessions: 100, Claims: 1000, Lease: 10 * time.Second, Window: 15 * time.Second},
}

// quick is p for development: every workload briefly (a few minutes), the
// same workers and leases, smaller sizes and fewer runs.
func (p plan) quick() plan {
	p.throughputFor = 1500 * time.Millisecond
	p.handoffFor = 2 * time.Second
	p.idleCounts = map[string][]int{
		systems.Monolock:  {2000},
		systems.Redis:     {2000},
		systems.Etcd:      {200},
		systems.ZooKeeper: {200},
		systems.Postgres:  {100},
	}
	p.idleWindow = 3 * time.Second
	p.deadTrials = 1
	p.clientFor = time.Second
	p.safetyRuns = 2
	p.failoverRuns = 1
	p.overlapRuns = 1
	p.sharedFor = 1500 * time.Millisecond
	p.electionRuns, p.electionParallel = 5, 5
	p.electionProclaims, p.electionRounds = 100, 2
	p.held.Sessions, p.held.Claims, p.held.Window = 10, 100, 3*time.Second
	return p
}

// options are the command line of the benchmark.
type options struct {
	out, analysis, only       string
	quick, noPeers, keepPeers bool
	render                    bool
	profileDir                string
	before                    string // the git revision monolock-before's server is built from
	plan                      plan
	systems, clients, safety  []string // the systems and clients to measure
	safetyRuns, overlapRuns   int
}

// benchMain runs the benchmark in its steps: read the command line, set up
// (peers, the server binary), run the workloads asked for, and write the
// report (merged into the last full run's when one section ran alone).
func benchMain() int {
	o, code := parseOptions()
	if code >= 0 {
		return code
	}
	log.SetFlags(log.Ltime)
	if o.render {
		return renderOnly(o.out, o.analysis)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	raiseFileLimit()
	r := newResults(o.quick)
	work, err := os.MkdirTemp("", "monolock-bench-")
	if err != nil {
		log.Print(err)
		return 1
	}
	defer os.RemoveAll(work)
	stopPeers, err := setUpPeers(o)
	if err != nil {
		log.Print(err)
		return 1
	}
	defer stopPeers()
	r.Versions = versions(o.systems)
	bin, err := monoserver.Build(filepath.Join("..", "go"), work)
	if err != nil {
		log.Print(err)
		return 1
	}
	beforeBin := ""
	if slices.Contains(o.systems, systems.MonolockBefore) {
		var commit string
		if beforeBin, commit, err = monoserver.BuildAt("..", o.before, work); err != nil {
			log.Print(err)
			return 1
		}
		r.Versions[systems.MonolockBefore] = beforeVersion(o.before, commit, beforeBin)
	}
	rn := &runner{ctx: ctx, plan: o.plan, bin: bin, beforeBin: beforeBin, work: work, r: r, systems: o.systems, clients: o.clients, profileDir: o.profileDir,
		safetyRuns: o.safetyRuns, safetyClientNames: o.safety, overlapRuns: o.overlapRuns}
	if err := runWorkloads(ctx, rn, o.only); err != nil {
		log.Print(err)
		return 1
	}
	return writeReport(o, r)
}

// parseOptions reads the command line; code is an exit status when the
// command must end at once, else -1.
func parseOptions() (o options, code int) {
	var (
		sysList    = flag.String("systems", strings.Join(systems.All, ","), "comma-separated `systems` to measure")
		clientList = flag.String("clients", strings.Join(wantedClients, ","), "comma-separated `clients` for the clients workload")
		safeList   = flag.String("safety-clients", strings.Join(safetyClients, ","), "comma-separated monolock `clients` for the safety workload")
		safeRuns   = flag.Int("safety-runs", 0, "runs per recipe and fault in the safety workload (`N`; default 5, 2 with -quick)")
		ovRuns     = flag.Int("overlap-runs", 0, "runs per tool, command and fault in the overlap workload (`N`; default 5, 1 with -quick)")
		workers    = flag.String("workers", "", "comma-separated worker `counts` for the throughput workload (default 1,16,64)")
		cellFor    = flag.Duration("throughput-for", 0, "`duration` of each throughput cell (default 10s, 1.5s with -quick)")
		heldSess   = flag.Int("held-sessions", 0, fmt.Sprintf("sessions of the held workload (`N`, 1 to %d; default 100, 10 with -quick)", workload.MaxHeldSessions))
		heldClaims = flag.Int("held-claims", 0, fmt.Sprintf("locks each session of the held workload holds (`N`, 1 to %d, at most %d in all; default 1000, 100 with -quick)", workload.MaxHeldClaims, workload.MaxHeldLocks))
		heldWindow = flag.Duration("held-window", 0, "the held workload's quiet `duration` of heartbeats only (default 15s, 3s with -quick)")
		handoffFor = flag.Duration("handoff-for", 0, "`duration` of each handoff cell (default 15s, 2s with -quick)")
		sharedFor  = flag.Duration("shared-for", 0, "`duration` of each cell of the shared, rwhandoff and semaphore workloads (default 5s, 1.5s with -quick)")
	)
	flag.StringVar(&o.out, "out", "../docs", "docs `directory` to write benchmarks.md and bench/*.png into")
	flag.BoolVar(&o.quick, "quick", false, "run every workload briefly (a few minutes), for development")
	flag.StringVar(&o.only, "workloads", strings.Join(allWorkloads, ","), "comma-separated `workloads` to run (safety, failover, overlap, election or held alone, or any of shared, rwhandoff and semaphore without the others, keeps the other sections of OUT/bench/results.json)")
	flag.BoolVar(&o.noPeers, "no-peers", false, "do not install/start/stop peers (they run already)")
	flag.BoolVar(&o.keepPeers, "keep-peers", false, "leave the peers running at the end")
	flag.StringVar(&o.profileDir, "profile", "", "write CPU profiles of the monolock server and of this client process into `dir`")
	flag.StringVar(&o.before, "before", "287c3cf", "git `revision` whose go/ the monolock-before system's `monolock serve` is built from (287c3cf is the last commit before protocol version 4 sessions began; $MONOLOCK_BEFORE_BIN, if set, is used instead of a build)")
	flag.BoolVar(&o.render, "render", false, "only re-render benchmarks.md and the charts from OUT/bench/results.json (after editing analysis.md)")
	flag.StringVar(&o.analysis, "analysis", "analysis.md", "hand-written `file` appended to benchmarks.md")
	flag.Parse()

	o.plan = fullPlan
	if o.quick {
		o.plan = fullPlan.quick()
	}
	if *workers != "" {
		o.plan.workerCounts = nil
		for _, f := range strings.Split(*workers, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				log.Printf("-workers: %q is not a worker count", f)
				return o, 2
			}
			o.plan.workerCounts = append(o.plan.workerCounts, n)
		}
	}
	if *cellFor > 0 {
		o.plan.throughputFor = *cellFor
	}
	if *sharedFor > 0 {
		o.plan.sharedFor = *sharedFor
	}
	if *handoffFor > 0 {
		o.plan.handoffFor = *handoffFor
	}
	o.plan.held.Sessions = cmp.Or(*heldSess, o.plan.held.Sessions)
	o.plan.held.Claims = cmp.Or(*heldClaims, o.plan.held.Claims)
	o.plan.held.Window = cmp.Or(*heldWindow, o.plan.held.Window)
	if err := o.plan.held.WithDefaults().Validate(); err != nil {
		log.Printf("-held-sessions, -held-claims, -held-window: %v", err)
		return o, 2
	}
	o.systems = pick(systems.All, *sysList)
	if len(o.systems) == 0 {
		log.Printf("-systems: none of %q is one of %s", *sysList, strings.Join(systems.All, ","))
		return o, 2
	}
	o.clients = pick(wantedClients, *clientList)
	o.safety = pick(safetyClients, *safeList)
	o.safetyRuns, o.overlapRuns = cmp.Or(*safeRuns, o.plan.safetyRuns), cmp.Or(*ovRuns, o.plan.overlapRuns)
	return o, -1
}

// pick keeps the names of all that the comma-separated list names, in the
// order of all.
func pick(all []string, list string) []string {
	var out []string
	for _, name := range all {
		if strings.Contains(","+list+",", ","+name+",") {
			out = append(out, name)
		}
	}
	return out
}

// newResults starts the results of a run with the machine it runs on.
func newResults(quick bool) *report.Results {
	return &report.Results{
		Started:   time.Now(),
		Command:   commandLine(),
		Quick:     quick,
		Cores:     runtime.NumCPU(),
		CPUModel:  cpuModel(),
		GoVersion: runtime.Version(),
		Kernel:    kernel(),
		LoadStart: loadavg(),
		Versions:  map[string]string{},
	}
}

// setUpPeers installs and starts the peers that a system of o needs,
// unless -no-peers; the function it returns stops them (unless
// -keep-peers).
func setUpPeers(o options) (stop func(), err error) {
	stop = func() {}
	if o.noPeers || !slices.ContainsFunc(o.systems, systems.Peer) {
		return stop, nil
	}
	if err := peersScript("install"); err != nil {
		return stop, fmt.Errorf("installing peers: %w", err)
	}
	if err := peersScript("start"); err != nil {
		return stop, fmt.Errorf("starting peers: %w", err)
	}
	if o.keepPeers {
		return stop, nil
	}
	return func() {
		if err := peersScript("stop"); err != nil {
			log.Printf("stopping peers: %v", err)
		}
	}, nil
}

// runWorkloads runs the workloads that only names, in run order.
func runWorkloads(ctx context.Context, rn *runner, only string) error {
	for _, w := range []struct {
		name string
		run  func() error
	}{
		{"throughput", rn.throughput},
		{"handoff", rn.handoff},
		{"dead", rn.dead},
		{"idle", rn.idle},
		{"held", rn.held},
		{"clients", rn.runClients},
		{"safety", rn.safety},
		{"failover", rn.failover},
		{"overlap", rn.overlap},
		{"shared", rn.sharedThroughput},
		{"rwhandoff", rn.rwHandoff},
		{"semaphore", rn.semaphore},
		{"election", rn.election},
	} {
		if len(pick([]string{w.name}, only)) == 0 {
			continue
		}
		if err := w.run(); err != nil {
			return fmt.Errorf("%s: %w", w.name, err)
		}
		if ctx.Err() != nil {
			return errors.New("interrupted")
		}
	}
	return nil
}

// writeReport ends r and writes benchmarks.md and the charts; a section
// that ran alone is merged into the last run's results first.
func writeReport(o options, r *report.Results) int {
	r.Duration = time.Since(r.Started)
	r.LoadEnd = loadavg()
	r.Notes = notes(r)
	took := r.Duration
	if section := separateSection(o.only); section != "" {
		// Only this section ran: keep every other section of the last run.
		if r.Shared != nil {
			r.Shared.Started, r.Shared.Duration, r.Shared.Command = r.Started, r.Duration, r.Command
			r.Shared.LoadStart, r.Shared.LoadEnd = r.LoadStart, r.LoadEnd
		}
		if r.Held != nil {
			r.Held.SeparateRun = report.SeparateRun{Started: r.Started, Duration: r.Duration, Command: r.Command, LoadStart: r.LoadStart, LoadEnd: r.LoadEnd}
		}
		if merged, ok := mergeSection(o.out, r, section); ok {
			log.Printf("merged the %s section into %s", section, filepath.Join(o.out, "bench", "results.json"))
			r = merged
		}
	}
	text, err := os.ReadFile(o.analysis)
	if err != nil && !os.IsNotExist(err) {
		log.Print(err)
		return 1
	}
	if err := report.Write(o.out, r, string(text), charts.PNG{}); err != nil {
		log.Print(err)
		return 1
	}
	log.Printf("wrote %s after %s", filepath.Join(o.out, "benchmarks.md"), took.Round(time.Second))
	return 0
}

// allWorkloads are the workloads in run order.
var allWorkloads = []string{"throughput", "handoff", "idle", "held", "dead", "clients", "safety", "failover", "overlap", "shared", "rwhandoff", "semaphore", "election"}

// separateSection is the section a -workloads list measures alone, to be
// merged into the last run's results: safety, failover, overlap, election or held, or
// "shared" for any of workload 9's parts without other workloads; "" when
// the list is a run of its own.
func separateSection(only string) string {
	switch only {
	case "safety", "failover", "overlap", "election", "held":
		return only
	}
	for _, w := range strings.Split(only, ",") {
		if !slices.Contains(sharedWorkloads, strings.TrimSpace(w)) {
			return ""
		}
	}
	return "shared"
}

// mergeSection puts r's section (safety, failover, overlap, election, held or shared) into the results of
// the last run in out, marked as measured separately; ok is false when
// there is none.
func mergeSection(out string, r *report.Results, section string) (*report.Results, bool) {
	b, err := os.ReadFile(filepath.Join(out, "bench", "results.json"))
	if err != nil {
		return nil, false
	}
	var old report.Results
	if err := json.Unmarshal(b, &old); err != nil {
		log.Printf("not merging: %v", err)
		return nil, false
	}
	switch section {
	case "safety":
		old.Safety, old.SafetyRun = r.Safety, r.SafetyRun
		if old.SafetyRun != nil {
			old.SafetyRun.Separate = true
		}
	case "failover":
		old.Failover = r.Failover
		if old.Failover != nil {
			old.Failover.Separate = true
		}
	case "overlap":
		old.Overlap, old.OverlapRun = r.Overlap, r.OverlapRun
		if old.OverlapRun != nil {
			old.OverlapRun.Separate = true
		}
	case "shared":
		old.Shared = report.MergeShared(old.Shared, r.Shared)
	case "election":
		old.Election = r.Election
		if old.Election != nil {
			old.Election.Separate = true
		}
	case "held":
		old.Held = r.Held
		if old.Held != nil {
			old.Held.Separate = true
		}
	}
	for k, v := range r.Versions {
		if _, ok := old.Versions[k]; !ok {
			if old.Versions == nil {
				old.Versions = map[string]string{}
			}
			old.Versions[k] = v
		}
	}
	return &old, true
}

// peersScript runs scripts/peers.sh with one verb.
func peersScript(verb string) error {
	cmd := exec.Command("bash", filepath.Join("scripts", "peers.sh"), verb)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd.Run()
}

// raiseFileLimit lifts RLIMIT_NOFILE so 100k idle connections fit, in this
// process and in the monolock server it starts (children inherit it).
func raiseFileLimit() {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return
	}
	want := uint64(400000)
	if lim.Max < want {
		// Raising the hard limit needs root (CAP_SYS_RESOURCE); without it
		// keep what we have, and the idle workload reports what failed.
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: want, Max: want}); err == nil {
			return
		}
		want = lim.Max
	}
	_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: want, Max: lim.Max})
}

func commandLine() string {
	args := append([]string{"go run ./cmd/bench"}, os.Args[1:]...)
	return "cd bench && " + strings.Join(args, " ")
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " / ")
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func kernel() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

// beforeVersion describes monolock-before's server for the report's
// servers row: the revision it was built from, or $MONOLOCK_BEFORE_BIN's
// path (commit is "" then).
func beforeVersion(rev, commit, bin string) string {
	if commit == "" {
		return "monolock serve, " + bin + " ($MONOLOCK_BEFORE_BIN)"
	}
	if rev != commit {
		return fmt.Sprintf("monolock serve, built from go/ at %s (%s)", commit, rev)
	}
	return "monolock serve, built from go/ at " + commit
}

// versions asks each peer binary for its version.
func versions(names []string) map[string]string {
	v := map[string]string{}
	run := func(name string, args ...string) string {
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			return "unknown"
		}
		line := strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
		return line
	}
	for _, n := range names {
		switch n {
		case systems.Redis:
			v[n] = run(n, "redis-server", "--version")
		case systems.Etcd:
			v[n] = run(n, "etcd", "--version")
		case systems.Postgres:
			pg, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
			if len(pg) > 0 {
				v[n] = run(n, pg[len(pg)-1], "--version")
			}
		case systems.ZooKeeper:
			if out, err := os.ReadFile("/usr/share/doc/zookeeper/changelog.Debian.gz"); err == nil && len(out) > 0 {
				v[n] = "Debian package"
			}
			if out, err := exec.Command("dpkg-query", "-W", "-f", "${Version}", "zookeeper").Output(); err == nil {
				v[n] = "zookeeper " + string(out)
			}
		case systems.Monolock, systems.MonolockBare, systems.MonolockSession, systems.MonolockSessionBare,
			systems.MonolockTLS, systems.MonolockTLSNoResume, systems.MonolockSessionTLS:
			v[systems.Monolock] = "monolock serve, built from ../go"
		case systems.Floor, systems.SessionFloor:
			v[systems.Floor] = "`bench floor` (package bench/internal/floor), " + runtime.Version()
		}
	}
	return v
}

// notes says what the reader must know about this run's conditions.
func notes(r *report.Results) []string {
	var ns []string
	var l1 float64
	fmt.Sscanf(r.LoadEnd, "%f", &l1)
	var l0 float64
	fmt.Sscanf(r.LoadStart, "%f", &l0)
	if max(l0, l1) > 0.5*float64(r.Cores) {
		ns = append(ns, fmt.Sprintf("The machine was shared while this ran (load average %s at the start, %s at the end, on %d cores): "+
			"other processes competed for the CPUs, so the absolute figures are lower and the tails longer than on an idle machine. "+
			"The ratios compare systems measured in the same conditions, one after another.", r.LoadStart, r.LoadEnd, r.Cores))
	}
	ns = append(ns, "Load generator and servers share the same cores: on a 2-core machine the client side of every workload takes CPU from the server it measures.")
	return ns
}

// renderOnly rewrites the report from a previous run's results.json.
func renderOnly(out, analysis string) int {
	b, err := os.ReadFile(filepath.Join(out, "bench", "results.json"))
	if err != nil {
		log.Print(err)
		return 1
	}
	var r report.Results
	if err := json.Unmarshal(b, &r); err != nil {
		log.Print(err)
		return 1
	}
	text, err := os.ReadFile(analysis)
	if err != nil && !os.IsNotExist(err) {
		log.Print(err)
		return 1
	}
	if err := report.Write(out, &r, string(text), charts.PNG{}); err != nil {
		log.Print(err)
		return 1
	}
	return 0
}
