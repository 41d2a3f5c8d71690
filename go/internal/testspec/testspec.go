// Package testspec reads the language-neutral data of the repository's
// spec/ directory for tests, from whichever package directory they run in.
package testspec

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Dir returns the spec/ directory: beside the Go module's root, the first
// directory above the test's working directory (its package) holding go.mod.
func Dir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "..", "spec"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testspec: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Read returns the content of spec/<rel>, failing the test if it cannot.
func Read(tb testing.TB, rel string) []byte {
	tb.Helper()
	dir, err := Dir()
	if err != nil {
		tb.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, rel))
	if err != nil {
		tb.Fatalf("read spec: %v", err)
	}
	return raw
}

// Load decodes spec/<rel> into v, failing the test if it cannot.
func Load(tb testing.TB, rel string, v any) {
	tb.Helper()
	if err := json.Unmarshal(Read(tb, rel), v); err != nil {
		tb.Fatalf("decode %s: %v", rel, err)
	}
}
