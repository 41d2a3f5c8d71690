// Package fuzztargets finds the fuzz targets of a Go module, for `mage
// fuzz`: every func FuzzName(f *testing.F) of its test files, found with
// go list and the Go parser rather than by scanning text.
package fuzztargets

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
)

// Target is one fuzz target.
type Target struct {
	Pkg  string // import path
	Dir  string // the package's directory
	Name string // FuzzName
}

// Find lists the fuzz targets of every package of the module in dir.
func Find(dir string) ([]Target, error) {
	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	var targets []Target
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p struct {
			ImportPath, Dir           string
			TestGoFiles, XTestGoFiles []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list: %w", err)
		}
		for _, file := range append(p.TestGoFiles, p.XTestGoFiles...) {
			names, err := fuzzFuncs(filepath.Join(p.Dir, file))
			if err != nil {
				return nil, err
			}
			for _, n := range names {
				targets = append(targets, Target{Pkg: p.ImportPath, Dir: p.Dir, Name: n})
			}
		}
	}
	return targets, nil
}

// fuzzFuncs returns the fuzz targets declared in the file at path: the
// functions named Fuzz... whose one parameter is a *testing.F.
func fuzzFuncs(path string) ([]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Fuzz") || len(fn.Type.Params.List) != 1 {
			continue
		}
		star, ok := fn.Type.Params.List[0].Type.(*ast.StarExpr)
		if !ok {
			continue
		}
		if sel, ok := star.X.(*ast.SelectorExpr); ok && sel.Sel.Name == "F" {
			if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "testing" {
				names = append(names, fn.Name.Name)
			}
		}
	}
	return names, nil
}
