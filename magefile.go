//go:build mage

// Build, test and run monolock across its languages.
//
// Run any target without installing mage: go run mage.go <target>.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/magefile/mage/mg"
	"github.com/magefile/mage/sh"
)

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
	return runIn("go", "go", "run", "./internal/release", "-version", version(), "-out", filepath.Join(root, "dist"))
}

// Serve builds monolock and runs the server on its defaults (127.0.0.1:7117).
func Serve() error {
	mg.Deps(Build)
	cmd := exec.Command(binPath(), "serve")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	return cmd.Run()
}

// Deps installs the system packages the tests need (etcd for the HA tests).
func Deps() error { return runIn(".", "bash", "scripts/deps.sh") }

// Go runs go vet and the race-enabled Go tests of the go, conformance and bench modules.
func (Test) Go() error {
	mg.Deps(Build, Deps) // tests of the real binary use MONOLOCK_BIN; HA tests run etcd
	for _, dir := range []string{"go", "conformance", "bench"} {
		if err := runIn(dir, "go", "vet", "./..."); err != nil {
			return err
		}
		if err := runIn(dir, "go", "test", "-race", "-count=1", "./..."); err != nil {
			return err
		}
	}
	return nil
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

// All runs every language's tests and the conformance matrix, and reports
// every failure rather than stopping at the first.
func (Test) All() error {
	var errs []error
	var failed []string
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
	} {
		fmt.Printf("==> %s\n", step.name)
		if err := step.fn(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", step.name, err))
			failed = append(failed, step.name)
		}
	}
	if len(failed) > 0 {
		fmt.Println("FAILED:", strings.Join(failed, ", "))
	}
	return errors.Join(errs...)
}

// Bench installs and starts Redis, etcd, PostgreSQL and ZooKeeper on
// loopback, measures them beside monolock serve, and regenerates
// docs/benchmarks.md and its charts (about 10 minutes; needs root for apt-get).
func Bench() error {
	mg.Deps(Build)
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
