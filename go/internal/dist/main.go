// Command dist cross-compiles the monolock command for every supported
// platform, with the version embedded, and writes SHA256SUMS beside the
// binaries. `mage release` runs it; by hand, from the go/ directory:
//
//	go run ./internal/dist -version v1.2.3 -out ../dist
//
// Binaries are static (CGO_ENABLED=0), built with -trimpath, and named
// monolock_VERSION_OS_ARCH (".exe" on Windows).
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// Target is one platform to build for.
type Target struct{ OS, Arch string }

// Targets are the platforms a release covers.
var Targets = []Target{
	{"linux", "amd64"}, {"linux", "arm64"},
	{"darwin", "amd64"}, {"darwin", "arm64"},
	{"windows", "amd64"}, {"windows", "arm64"},
}

// BinaryName is the file name of the binary for t.
func BinaryName(version string, t Target) string {
	name := fmt.Sprintf("monolock_%s_%s_%s", version, t.OS, t.Arch)
	if t.OS == "windows" {
		name += ".exe"
	}
	return name
}

func main() {
	version := flag.String("version", "", "version to embed (default: git describe --tags --always --dirty)")
	out := flag.String("out", "../dist", "output `directory`")
	only := flag.String("targets", "", "comma-separated os/arch subset, e.g. linux/amd64 (default: all)")
	flag.Parse()
	if err := run(*version, *out, *only); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(version, out, only string) error {
	if version == "" {
		version = gitVersion()
	}
	if strings.ContainsAny(version, ` /\`) {
		return fmt.Errorf("version %q must not contain spaces or slashes", version)
	}
	targets, err := selectTargets(only)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	sums := map[string]string{}
	for _, t := range targets {
		name := BinaryName(version, t)
		path := filepath.Join(out, name)
		fmt.Fprintf(os.Stderr, "building %s\n", name)
		cmd := exec.Command("go", "build", "-trimpath",
			"-ldflags", "-s -w -X main.version="+version,
			"-o", path, "./cmd/monolock")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+t.OS, "GOARCH="+t.Arch)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s/%s: %w", t.OS, t.Arch, err)
		}
		if sums[name], err = sha256File(path); err != nil {
			return err
		}
	}
	return writeSums(filepath.Join(out, "SHA256SUMS"), sums)
}

func selectTargets(only string) ([]Target, error) {
	if only == "" {
		return Targets, nil
	}
	var picked []Target
	for _, s := range strings.Split(only, ",") {
		found := false
		for _, t := range Targets {
			if t.OS+"/"+t.Arch == strings.TrimSpace(s) {
				picked = append(picked, t)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown target %q", s)
		}
	}
	return picked, nil
}

func gitVersion() string {
	out, err := exec.Command("git", "describe", "--tags", "--always", "--dirty").Output()
	if v := strings.TrimSpace(string(out)); err == nil && v != "" {
		return v
	}
	return "dev"
}

func sha256File(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeSums writes the checksums in the format `sha256sum -c` reads.
func writeSums(path string, sums map[string]string) error {
	names := make([]string, 0, len(sums))
	for n := range sums {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "%s  %s\n", sums[n], n)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
