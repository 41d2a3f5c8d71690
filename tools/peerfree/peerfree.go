// Package peerfree sorts a module's packages by whether they, with their
// tests, link any of a list of modules: test:go tests the benchmark's
// packages that link no peer client (Redis, etcd, PostgreSQL, ZooKeeper)
// and no plotting library, so that `mage test:all` builds none of them.
package peerfree

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
)

// Packages lists the packages of the module in dir whose dependencies,
// their tests' included, are in none of the modules whose paths start with
// a prefix of peers. A package that links one and has tests must be one of
// tested (run elsewhere), else it is an error: its tests would run nowhere.
func Packages(dir string, peers, tested []string) ([]string, error) {
	pkgs, err := list(dir, "./...")
	if err != nil {
		return nil, err
	}
	var free, untested []string
	for _, p := range pkgs {
		deps, err := list(dir, "-test", "-deps", p.ImportPath)
		if err != nil {
			return nil, err
		}
		peer := ""
		for _, d := range deps {
			for _, prefix := range peers {
				if d.Module != nil && strings.HasPrefix(d.Module.Path, prefix) {
					peer = d.Module.Path
				}
			}
		}
		hasTests := len(p.TestGoFiles) > 0 || len(p.XTestGoFiles) > 0
		switch {
		case peer == "":
			free = append(free, p.ImportPath)
		case hasTests && !slices.Contains(tested, p.ImportPath):
			untested = append(untested, p.ImportPath+" (links "+peer+")")
		}
	}
	if len(untested) > 0 {
		return nil, fmt.Errorf("these packages link a peer client or plotting library and have tests, which test:go does not run: %s; move the tested code to a peer-free package, or add the package to benchPeerTests (run by bench)", strings.Join(untested, ", "))
	}
	return free, nil
}

// pkg is what Packages reads of go list -json.
type pkg struct {
	ImportPath                string
	TestGoFiles, XTestGoFiles []string
	Module                    *struct{ Path string }
}

// list runs go list -json with args in dir.
func list(dir string, args ...string) ([]pkg, error) {
	cmd := exec.Command("go", append([]string{"list", "-json"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list %s: %w", strings.Join(args, " "), err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			return pkgs, nil
		} else if err != nil {
			return nil, fmt.Errorf("go list %s: %w", strings.Join(args, " "), err)
		}
		pkgs = append(pkgs, p)
	}
}
