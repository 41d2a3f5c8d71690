// Command specgen writes every language's error table and constants from
// spec/errors.json and spec/constants.json, and the table of
// docs/errors.md. Run it as go run mage.go gen; go run mage.go test:gen
// (part of test:go) runs it with -check, which writes nothing and fails when
// a generated file differs from what the spec gives.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// output is one generated file (or, for a Markdown page, its marked section).
type output struct {
	path    string // relative to the repository root
	content []byte
}

// generators each turn the spec into one or more files.
var generators = []func(root string, s *spec) ([]output, error){
	genGo,
	genPython,
	genNode,
	genRust,
	genDocs,
}

func main() {
	root := flag.String("root", ".", "repository root")
	check := flag.Bool("check", false, "write nothing; fail if a generated file is stale")
	flag.Parse()
	if err := run(*root, *check); err != nil {
		fmt.Fprintln(os.Stderr, "specgen:", err)
		os.Exit(1)
	}
}

func run(root string, check bool) error {
	s, err := loadSpec(root)
	if err != nil {
		return err
	}
	var outs []output
	for _, g := range generators {
		o, err := g(root, s)
		if err != nil {
			return err
		}
		outs = append(outs, o...)
	}
	var stale []string
	for _, o := range outs {
		path := filepath.Join(root, filepath.FromSlash(o.path))
		old, err := os.ReadFile(path)
		if err == nil && bytes.Equal(old, o.content) {
			continue
		}
		if check {
			stale = append(stale, o.path)
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, o.content, 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", o.path)
	}
	if len(stale) > 0 {
		sort.Strings(stale)
		return fmt.Errorf("stale against spec/: %s; run go run mage.go gen and commit the result", strings.Join(stale, ", "))
	}
	return nil
}
