package main

import (
	"path/filepath"
	"slices"
	"strings"

	conformance "github.com/monolock/monolock/conformance/runner"
)

// driverSpecs returns every driver of conformance/manifest.json, for
// workloads 5 and 6: each client is measured through its own conformance
// driver, Go's included. Rust drivers are built and run in release mode (a
// debug build would measure the compiler's settings), and the Go driver is
// built into this run's work directory instead of the repository's bin/.
func driverSpecs(root, work string) (map[string]conformance.Client, error) {
	m, err := conformance.LoadManifest(filepath.Join(root, "conformance", "manifest.json"))
	if err != nil {
		return nil, err
	}
	specs := map[string]conformance.Client{}
	for _, s := range m.Clients {
		s.Build, s.Run = slices.Clone(s.Build), slices.Clone(s.Run)
		if len(s.Build) > 1 && s.Build[0] == "cargo" && s.Build[1] == "build" && !slices.Contains(s.Build, "--release") {
			s.Build = slices.Insert(s.Build, 2, "--release")
			s.Run[0] = strings.Replace(s.Run[0], "target/debug/", "target/release/", 1)
		}
		if len(s.Build) > 1 && s.Build[0] == "go" && s.Build[1] == "build" {
			if i := slices.Index(s.Build, "-o"); i >= 0 && i+1 < len(s.Build) && len(s.Run) > 0 && s.Run[0] == s.Build[i+1] {
				out := filepath.Join(work, "drivers", s.Name)
				s.Build[i+1], s.Run[0] = out, out
			}
		}
		specs[s.Name] = s
	}
	return specs, nil
}
