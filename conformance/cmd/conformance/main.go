// Command conformance runs the monolock conformance matrix: every scenario
// of spec/scenarios against every client driver of a manifest, on the real
// server, the scripted fake server and the fault proxy. It prints a
// scenario x client table, writes matrix.json and matrix.md, and exits 1 on
// any unexpected result (2 on a usage or setup error).
//
//	go run ./cmd/conformance [-manifest manifest.json] [-scenarios ../spec/scenarios]
//	    [-out results] [-clients go,python] [-run REGEXP] [-parallel 4]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"github.com/monolock/monolock/conformance/runner"
	"github.com/monolock/monolock/conformance/scenario"
)

func main() {
	os.Exit(run())
}

func run() int {
	var (
		manifests = flag.String("manifest", "manifest.json", "comma-separated manifests listing the drivers")
		scenDir   = flag.String("scenarios", "", "scenario directory (default: <root>/spec/scenarios)")
		outDir    = flag.String("out", "results", "directory for matrix.json and matrix.md (empty: none)")
		clients   = flag.String("clients", "", "comma-separated client names to run (default: all)")
		runRE     = flag.String("run", "", "regular expression selecting scenarios by name")
		parallel  = flag.Int("parallel", 6, "scenario runs at once (they wait on timers far more than they compute)")
		failures  = flag.String("failures", "", "directory of <client>.txt known-failure lists (default: <root>/conformance/failures)")
		serverBin = flag.String("server-bin", "", "monolock binary (default: $MONOLOCK_BIN, else build go/cmd/monolock)")
		noBuild   = flag.Bool("no-build", false, "skip the drivers' build commands")
		rerun     = flag.Int("rerun", 1, "rerun a fail or timeout up to N times; a pass on rerun is reported as flaky (ok~) and does not fail the run; 0: strict")
		list      = flag.Bool("list", false, "list the scenarios with their descriptions and exit")
	)
	flag.Parse()

	root, err := runner.FindRoot(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if *scenDir == "" {
		*scenDir = filepath.Join(root, "spec", "scenarios")
	}
	if *failures == "" {
		*failures = filepath.Join(root, "conformance", "failures")
	}
	scs, err := scenario.LoadDir(*scenDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if *runRE != "" {
		re, err := regexp.Compile(*runRE)
		if err != nil {
			fmt.Fprintln(os.Stderr, "-run:", err)
			return 2
		}
		var keep []*scenario.Scenario
		for _, s := range scs {
			if re.MatchString(s.Name) {
				keep = append(keep, s)
			}
		}
		scs = keep
	}
	if *list {
		for _, s := range scs {
			fmt.Printf("%-36s %-6s %s\n", s.Name, s.Backend, s.Description)
		}
		return 0
	}

	var all []runner.Client
	for _, path := range strings.Split(*manifests, ",") {
		m, err := runner.LoadManifest(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		all = append(all, m.Clients...)
	}
	selected := all
	if *clients != "" {
		want := map[string]bool{}
		for _, c := range strings.Split(*clients, ",") {
			want[strings.TrimSpace(c)] = true
		}
		selected = nil
		for _, c := range all {
			if want[c.Name] {
				selected = append(selected, c)
				delete(want, c.Name)
			}
		}
		for name := range want {
			fmt.Fprintf(os.Stderr, "no client %q in the manifest\n", name)
			return 2
		}
	}
	if len(selected) == 0 || len(scs) == 0 {
		fmt.Fprintln(os.Stderr, "nothing to run: no clients or no scenarios selected")
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opt := runner.MatrixOptions{
		Options:     runner.Options{Root: root, ServerBin: *serverBin},
		Parallel:    *parallel,
		FailuresDir: *failures,
		SkipBuild:   *noBuild,
		Rerun:       *rerun,
		Log:         os.Stderr,
	}
	m := runner.RunMatrix(ctx, selected, scs, opt)
	fmt.Println()
	m.WriteTable(os.Stdout)
	if *outDir != "" {
		if err := m.WriteFiles(*outDir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		fmt.Printf("wrote %s and %s\n", filepath.Join(*outDir, "matrix.json"), filepath.Join(*outDir, "matrix.md"))
	}
	if m.Unexpected > 0 {
		return 1
	}
	return 0
}
