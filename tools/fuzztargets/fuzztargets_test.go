package fuzztargets

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestFindsEveryFuzzTargetAndNothingElse(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/m\n\ngo 1.22\n")
	write("m.go", "package m\n\nfunc FuzzNotATest(x int) {}\n")
	write("m_test.go", `package m

import "testing"

func FuzzDecode(f *testing.F) {}

func FuzzWrongParam(t *testing.T) {}

// func FuzzInAComment(f *testing.F) {}
var _ = "func FuzzInAString(f *testing.F) {"

func TestNot(t *testing.T) {}
`)
	write("x_test.go", "package m_test\n\nimport \"testing\"\n\nfunc FuzzExternal(f *testing.F) {}\n")
	got, err := Find(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tg := range got {
		if tg.Pkg != "example.com/m" || tg.Dir != dir {
			t.Errorf("target %+v: wrong package or directory", tg)
		}
		names = append(names, tg.Name)
	}
	slices.Sort(names)
	if want := []string{"FuzzDecode", "FuzzExternal"}; !slices.Equal(names, want) {
		t.Fatalf("found %v, want %v", names, want)
	}
}

// The go module's own targets are found (mage fuzz runs them).
func TestFindsTheGoModulesTargets(t *testing.T) {
	got, err := Find(filepath.Join("..", "..", "go"))
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, tg := range got {
		found[tg.Name] = true
	}
	for _, want := range []string{"FuzzReadAcquire", "FuzzReadAcquireBody", "FuzzDecoder"} {
		if !found[want] {
			t.Errorf("%s not found among %d targets", want, len(got))
		}
	}
}
