// Package testtools finds the system tools that tests run: the programs
// from outside the Go toolchain that scripts/system-tools.tsv declares,
// with the Debian package of each. A test asks with Require, which fails
// the test loudly when the program is missing (naming the package and the
// command that installs it) and also when the program is not on the list,
// so that no test can come to need a program a new machine lacks.
package testtools

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// ListPath is where the list lives, relative to the repository's root.
const ListPath = "scripts/system-tools.tsv"

// Tool is one row of the list.
type Tool struct {
	Name    string // what Require is asked for
	Package string // the Debian package that provides it
	Path    string // "" when looked up on PATH, else the absolute path the package installs
	Group   string // "test" (installed by mage deps) or "bench" (by peers.sh install)
}

// installHint says how to install t.
func (t Tool) installHint() string {
	if t.Group == "bench" {
		return "bash bench/scripts/peers.sh install (apt-get install " + t.Package + ")"
	}
	return "go run mage.go deps (apt-get install " + t.Package + ")"
}

var (
	loadOnce sync.Once
	loaded   []Tool
	loadErr  error
)

// List returns the list of the repository that holds the working
// directory (a test runs in its package's directory).
func List() ([]Tool, error) {
	loadOnce.Do(func() {
		path, err := findList()
		if err != nil {
			loadErr = err
			return
		}
		loaded, loadErr = readList(path)
	})
	return loaded, loadErr
}

func findList() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		path := filepath.Join(dir, ListPath)
		if _, err := os.Stat(path); err == nil {
			return path, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("testtools: no %s above the working directory", ListPath)
		}
		dir = parent
	}
}

func readList(path string) ([]Tool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var tools []Tool
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if text == "" || strings.HasPrefix(text, "#") || strings.HasPrefix(text, "name\t") {
			continue
		}
		cols := strings.Split(text, "\t")
		if len(cols) != 5 {
			return nil, fmt.Errorf("%s:%d: %d columns, want 5 separated by tabs (name, package, path, group, used by)", path, line, len(cols))
		}
		t := Tool{Name: cols[0], Package: cols[1], Path: cols[2], Group: cols[3]}
		if t.Path == "-" {
			t.Path = ""
		} else if !filepath.IsAbs(t.Path) {
			return nil, fmt.Errorf("%s:%d: path %q is neither - nor absolute", path, line, t.Path)
		}
		tools = append(tools, t)
	}
	return tools, sc.Err()
}

// ErrNotListed is the error of Lookup for a program that is not on the list.
var ErrNotListed = errors.New("not on " + ListPath)

// Lookup returns where the listed program name is installed. The error
// names the Debian package and the command that installs it; a name that is
// not on the list is an error (ErrNotListed) even if it is installed.
func Lookup(name string) (string, error) {
	tools, err := List()
	if err != nil {
		return "", err
	}
	return lookup(tools, name)
}

func lookup(tools []Tool, name string) (string, error) {
	for _, t := range tools {
		if t.Name != name {
			continue
		}
		if t.Path != "" {
			if _, err := os.Stat(t.Path); err != nil {
				return "", fmt.Errorf("%s is not installed (no %s; Debian package %s): run %s", name, t.Path, t.Package, t.installHint())
			}
			return t.Path, nil
		}
		path, err := exec.LookPath(name)
		if err != nil {
			return "", fmt.Errorf("%s is not installed (Debian package %s): run %s", name, t.Package, t.installHint())
		}
		return path, nil
	}
	return "", fmt.Errorf("%s is %w: declare it there (name, Debian package, path, group) so that a new machine installs it", name, ErrNotListed)
}

// Require is Lookup for a test: a missing or undeclared program fails the
// test at once, with Lookup's message.
func Require(t testing.TB, name string) string {
	t.Helper()
	path, err := Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return path
}
