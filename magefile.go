//go:build mage

// Build, test and run monolock across its languages.
//
// Run any target without installing mage: go run mage.go <target>.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/magefile/mage/mg"
	"github.com/magefile/mage/sh"

	"github.com/monolock/monolock/tools/foreground"
	"github.com/monolock/monolock/tools/fuzztargets"
	"github.com/monolock/monolock/tools/peerfree"
)

// Aliases: a top-level function and a namespace cannot share the name
// Chaos, so the smoke run's namespaced spelling is an alias.
var Aliases = map[string]any{"chaos:smoke": ChaosSmoke}

// Test groups the test targets; test:all runs every one of them.
type Test mg.Namespace

var root = mustGetwd()

func mustGetwd() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return wd
}

// binPath is where build puts the monolock binary; language test suites find
// it through MONOLOCK_BIN.
func binPath() string {
	name := "monolock"
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	return filepath.Join(root, "bin", name)
}

func version() string {
	if v, err := sh.Output("git", "describe", "--tags", "--always", "--dirty"); err == nil && v != "" {
		return v
	}
	return "dev"
}

// Build compiles the monolock command into bin/monolock.
func Build() error {
	return runIn("go", "go", "build", "-ldflags", "-X main.version="+version(), "-o", binPath(), "./cmd/monolock")
}

// Release cross-compiles monolock for linux, darwin and windows on amd64 and
// arm64 into dist/, with the version embedded and a SHA256SUMS file.
func Release() error {
	return runIn("go", "go", "run", "./internal/dist", "-version", version(), "-out", filepath.Join(root, "dist"))
}

// Serve builds monolock and runs the server on its defaults (127.0.0.1:7117).
// Stopping what you started stops the server: Ctrl-C, SIGTERM or SIGHUP to
// any process of the chain, or the end of the process that started this
// one, such as `kill $!` after `go run mage.go serve &` (that kills only the
// go command).
func Serve(ctx context.Context) error {
	mg.CtxDeps(ctx, Build)
	return foreground.Run(ctx, exec.Command(binPath(), "serve"), "monolock serve", time.Minute)
}

// Ha builds monolock and runs a local HA cell until Ctrl-C: a three-member
// etcd and three servers on 127.0.0.1:7217, :7227 and :7237, admin APIs
// one port above (docs/ha.md). It builds go/testkit/cmd/hacell and runs the
// binary itself, not through go run, so that stopping this target (Ctrl-C,
// SIGTERM, SIGHUP, or the end of the go command above it, as with `kill $!`
// after `go run mage.go ha &`) reaches the cell, which stops every server and
// etcd member it started.
func Ha(ctx context.Context) error {
	mg.CtxDeps(ctx, Build, Deps)
	hacell := filepath.Join(root, "bin", "hacell")
	if err := runIn("go", "go", "build", "-o", hacell, "./testkit/cmd/hacell"); err != nil {
		return err
	}
	// The cell stops its three servers one after the other, each within 15 s.
	return foreground.Run(ctx, exec.Command(hacell, "-bin", binPath()), "hacell", 2*time.Minute)
}

// Deps installs the system packages the tests need (etcd for the HA tests).
func Deps() error { return runIn(".", "bash", "scripts/deps.sh") }

// Gen writes every client's error table and constants, and the table of
// docs/errors.md, from spec/errors.json and spec/constants.json
// (tools/specgen). Run it after changing either file, and commit the result.
func Gen() error { return runIn(".", "go", "run", "./tools/specgen") }

// Gen fails when a file that gen writes is not what spec/ gives (it writes
// nothing). test:go runs it first, and so does test:all.
func (Test) Gen() error { return runIn(".", "go", "run", "./tools/specgen", "-check") }

// Go checks that the generated files are up to date (test:gen), then runs go
// vet and the race-enabled Go tests of the go, conformance and
// examples/fencing modules and of bench's peer-free packages, and vets and
// tests the generator (tools/). In bench only the packages that link none
// of benchPeerModules are vetted and tested (benchPackages), so test:all
// builds no peer client and no plotting library; it fails if a package that
// links one has tests and is not in benchPeerTests, which bench runs.
func (Test) Go() error {
	mg.Deps(Build, Deps) // tests of the real binary use MONOLOCK_BIN; HA tests run etcd
	// Every module is checked even after a failure, as test:all does with
	// its steps, so one run shows every broken module.
	var errs []error
	if err := (Test{}).Gen(); err != nil {
		errs = append(errs, fmt.Errorf("test:gen: %w", err))
	}
	if err := runIn(".", "go", "vet", "./tools/..."); err != nil {
		errs = append(errs, fmt.Errorf("tools: go vet: %w", err))
	}
	if err := runIn(".", "go", "test", "-count=1", "./tools/..."); err != nil {
		errs = append(errs, fmt.Errorf("tools: go test: %w", err))
	}
	for _, dir := range []string{"go", "conformance", "bench", "examples/fencing"} {
		pkgs := []string{"./..."}
		if dir == "bench" {
			free, err := benchPackages()
			if err != nil {
				errs = append(errs, fmt.Errorf("bench: %w", err))
				continue
			}
			pkgs = free
		}
		if err := runIn(dir, "go", append([]string{"vet"}, pkgs...)...); err != nil {
			errs = append(errs, fmt.Errorf("%s: go vet: %w", dir, err))
		}
		// The mutants' proof runs every scenario against 22 clients, about
		// 6 minutes on 2 cores: past a loaded machine's margin under go
		// test's default 10-minute limit. Each long test bounds itself.
		if err := runIn(dir, "go", append([]string{"test", "-race", "-count=1", "-timeout", "20m"}, pkgs...)...); err != nil {
			errs = append(errs, fmt.Errorf("%s: go test: %w", dir, err))
		}
	}
	return errors.Join(errs...)
}

// benchPeerModules are the modules of the benchmark's peer clients and
// charts: bench's packages that link one (with their tests) are built by
// bench, never by test:go.
var benchPeerModules = []string{
	"github.com/redis/go-redis/",
	"github.com/go-redsync/redsync/",
	"github.com/jackc/",
	"github.com/go-zookeeper/zk",
	"go.etcd.io/etcd/client/",
	"gonum.org/v1/plot",
}

// benchPeerTests are bench's packages that link a peer module and have
// tests: bench runs them before it measures.
var benchPeerTests = []string{"github.com/monolock/monolock/bench/internal/charts"}

// benchPackages lists bench's packages whose dependencies, tests' included,
// are free of benchPeerModules. It fails if a package that links one has
// tests and is not in benchPeerTests: such a test would run nowhere.
func benchPackages() ([]string, error) {
	return peerfree.Packages(filepath.Join(root, "bench"), benchPeerModules, benchPeerTests)
}

// Python runs python/scripts/test.sh: its own venv, ruff, mypy --strict, pytest.
func (Test) Python() error { mg.Deps(Build); return runIn("python", "bash", "scripts/test.sh") }

// Node runs node/scripts/test.sh: npm ci, type-check, lint, node --test, pack smoke test.
func (Test) Node() error { mg.Deps(Build); return runIn("node", "bash", "scripts/test.sh") }

// Rust runs rust/scripts/test.sh: fmt, clippy, cargo test, cargo package.
func (Test) Rust() error { mg.Deps(Build); return runIn("rust", "bash", "scripts/test.sh") }

// Mobile groups the gomobile binding targets.
type Mobile mg.Namespace

// Jvm generates the Java bindings with gobind, builds them for the desktop
// JVM and runs the Java tests against the real server.
func (Mobile) Jvm() error { mg.Deps(Build); return runIn(".", "bash", "mobile/scripts/jvm.sh") }

// Android builds an AAR with gomobile bind (needs an Android SDK and NDK).
func (Mobile) Android() error { return runIn(".", "bash", "mobile/scripts/android.sh") }

// Ios builds an XCFramework with gomobile bind (needs macOS and Xcode).
func (Mobile) Ios() error { return runIn(".", "bash", "mobile/scripts/ios.sh") }

// All runs every language's tests and the conformance matrix, reports
// every failure rather than stopping at the first, and ends with a table of
// the steps.
func (Test) All() error {
	type result struct {
		name, outcome string
		took          time.Duration
	}
	var (
		errs    []error
		results []result
	)
	for _, step := range []struct {
		name string
		fn   func() error
	}{
		{"test:go", Test{}.Go},
		{"test:python", Test{}.Python},
		{"test:node", Test{}.Node},
		{"test:rust", Test{}.Rust},
		{"mobile:jvm", Mobile{}.Jvm},
		{"conformance", Conformance},
		{"chaos:smoke", ChaosSmoke},
	} {
		fmt.Printf("==> %s\n", step.name)
		start := time.Now()
		err := step.fn()
		r := result{name: step.name, outcome: "ok", took: time.Since(start).Round(time.Second)}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", step.name, err))
			r.outcome = "FAILED"
		}
		results = append(results, r)
	}
	fmt.Println("\n==> test:all summary")
	tw := tabwriter.NewWriter(os.Stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "step\tresult\tduration")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%v\n", r.name, r.outcome, r.took)
	}
	tw.Flush()
	return errors.Join(errs...)
}

// Bench installs and starts Redis, etcd, PostgreSQL and ZooKeeper on
// loopback, measures them beside monolock serve, and regenerates
// docs/benchmarks.md and its charts (about 10 minutes; needs root for
// apt-get), after the tests of benchPeerTests, which test:go leaves out.
func Bench() error {
	mg.Deps(Build)
	// The tests of the packages that link a peer or plotting library, which
	// test:go leaves out (benchPeerTests), first.
	if err := runIn("bench", "go", append([]string{"test", "-count=1"}, benchPeerTests...)...); err != nil {
		return err
	}
	return runIn("bench", "go", "run", "./cmd/bench", "-out", "../docs")
}

// Conformance runs every client of conformance/manifest.json through every
// scenario of spec/scenarios against the real server, the scripted fake
// server and the fault proxy, prints the matrix and writes conformance/results/.
func Conformance() error {
	mg.Deps(Build)
	return runIn("conformance", "go", "run", "./cmd/conformance",
		"-manifest", "manifest.json", "-scenarios", "../spec/scenarios", "-out", "results")
}

// Chaos runs the chaos harness (docs/chaos.md): a worker of every client
// on a lock of readers and writers or on a semaphore, beside exclusive
// claims, against one server, then against an HA cell of three servers
// on three etcd members, while it injects faults; $CHAOS_DURATION in all
// (default 10m), split between the two. It fails on any broken promise.
func Chaos() error {
	mg.Deps(Build, Deps)
	d := os.Getenv("CHAOS_DURATION")
	if d == "" {
		d = "10m"
	}
	return runIn("conformance", "go", "run", "./cmd/chaos", "-mode", "both", "-duration", d)
}

// ChaosSmoke is test:all's one-minute chaos run (also `chaos:smoke`), after
// the conformance step has built every driver. The harness is in the
// conformance module, so this builds none of the benchmark's dependencies.
func ChaosSmoke() error {
	mg.Deps(Build, Deps)
	return runIn("conformance", "go", "run", "./cmd/chaos", "-mode", "both", "-duration", "60s", "-no-build")
}

// runIn runs a command with dir (relative to the repository root) as its
// working directory, streaming its output.
func runIn(dir, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = filepath.Join(root, dir)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "MONOLOCK_BIN="+binPath())
	fmt.Printf("[%s] %s %s\n", dir, name, strings.Join(args, " "))
	return cmd.Run()
}

// Fuzz runs every fuzz target of the go module, one after the other, for
// $FUZZTIME each (default 30s), and adds the inputs each run found
// interesting to its package's testdata/fuzz, where go test replays them
// (commit them). Not part of test:all.
func Fuzz() error {
	fuzztime := os.Getenv("FUZZTIME")
	if fuzztime == "" {
		fuzztime = "30s"
	}
	gocache, err := sh.Output("go", "env", "GOCACHE")
	if err != nil {
		return err
	}
	targets, err := fuzztargets.Find(filepath.Join(root, "go"))
	if err != nil {
		return err
	}
	ran := 0
	for _, tg := range targets {
		if err := runIn("go", "go", "test", "-run", "^$", "-fuzz", "^"+tg.Name+"$", "-fuzztime", fuzztime, tg.Pkg); err != nil {
			return err
		}
		ran++
		if err := keepCorpus(filepath.Join(gocache, "fuzz", tg.Pkg, tg.Name), filepath.Join(tg.Dir, "testdata", "fuzz", tg.Name)); err != nil {
			return err
		}
	}
	if ran == 0 {
		return errors.New("no fuzz targets found")
	}
	return nil
}

// keepCorpus copies to the testdata dir to the inputs of the fuzz cache dir
// from that it lacks (their names are hashes of their contents).
func keepCorpus(from, to string) error {
	entries, err := os.ReadDir(from)
	if err != nil {
		return nil // nothing found worth keeping
	}
	added := 0
	for _, e := range entries {
		dst := filepath.Join(to, e.Name())
		if _, err := os.Stat(dst); err == nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			return err
		}
		if err := os.MkdirAll(to, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			return err
		}
		added++
	}
	if added > 0 {
		fmt.Printf("%d new inputs in %s\n", added, to)
	}
	return nil
}
