package client_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The install lines both READMEs give for a clone at /path/to/clone.
const (
	replaceLine = "go mod edit -replace github.com/monolock/monolock/go=/path/to/clone/go"
	getLine     = "go get github.com/monolock/monolock/go/client"
)

// TestReadmesInAFreshModule does what the READMEs tell a newcomer, in a new
// module whose clone is this source tree: the install lines, then the Go
// code, which must compile as written (go/client/README.md's quick start is
// a whole program; the top-level README's snippet is a function body).
func TestReadmesInAFreshModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module of its own")
	}
	goDir, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	top := readFile(t, filepath.Join(goDir, "..", "README.md"))
	pkg := readFile(t, "README.md")
	for name, text := range map[string]string{"README.md": top, "go/client/README.md": pkg} {
		for _, line := range []string{replaceLine, getLine} {
			if !strings.Contains(text, line) {
				t.Errorf("%s does not show %q", name, line)
			}
		}
	}

	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "main.go"), codeBlock(t, pkg, "## Quick start"))
	writeFile(t, filepath.Join(dir, "snippet", "snippet.go"), `package snippet

import (
	"context"
	"time"

	"github.com/monolock/monolock/go/client"
)

var _ = time.Second
var _ = client.New

func useIt(ctx context.Context) error {
`+codeBlock(t, top, "## Use it from code")+`
	return nil
}

func shareIt(ctx context.Context, c *client.Client) error {
`+codeBlock(t, pkg, "## Shared locks and semaphores")+`
	return nil
}

func sessionIt(ctx context.Context, c *client.Client) error {
`+codeBlock(t, pkg, "## Sessions")+`
	return nil
}
`)
	goCmd(t, dir, "mod", "init", "example.com/fresh")
	goCmd(t, dir, strings.Fields(strings.Replace(replaceLine, "/path/to/clone/go", goDir, 1))[1:]...)
	goCmd(t, dir, strings.Fields(getLine)[1:]...)
	goCmd(t, dir, "vet", "./...")
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// codeBlock returns the first ```go block after the heading.
func codeBlock(t *testing.T, markdown, heading string) string {
	t.Helper()
	_, after, ok := strings.Cut(markdown, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("no %q section", heading)
	}
	_, after, ok = strings.Cut(after, "```go\n")
	if !ok {
		t.Fatalf("no Go code under %q", heading)
	}
	code, _, ok := strings.Cut(after, "```")
	if !ok {
		t.Fatalf("unterminated Go code under %q", heading)
	}
	return code
}

// goCmd runs the go command in dir. The clone's dependencies are in the
// module cache already (this test was built with them), so the fresh
// module takes them from there and needs no network.
func goCmd(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOPROXY=off", "GOSUMDB=off", "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}
