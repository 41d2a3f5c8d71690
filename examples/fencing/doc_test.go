package fencing_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// docs/fencing.md shows the recipes that these tests run, verbatim: the
// SQL and Lua files whole, the Go functions, and the shell command.
func TestDocShowsTheRecipesThatRun(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repo, "docs/fencing.md"))
	require.NoError(t, err)
	for _, file := range []string{"fence.sql", "fence.lua", "write-report.sql"} {
		b, err := os.ReadFile(file)
		require.NoError(t, err)
		require.Contains(t, string(doc), string(b), "docs/fencing.md shows %s", file)
	}
	src, err := os.ReadFile("fencing.go")
	require.NoError(t, err)
	for _, fn := range []string{"func Postgres(", "func Redis("} {
		i := strings.Index(string(src), fn)
		require.GreaterOrEqual(t, i, 0, fn)
		end := strings.Index(string(src[i:]), "\n}\n")
		require.Greater(t, end, 0, fn)
		require.Contains(t, string(doc), string(src[i:i+end+3]), "docs/fencing.md shows %s...}", fn)
	}
	require.Contains(t, string(doc), "sh -c '"+psqlRecipe+"'")
}

// The "Try it on one machine" block of docs/fencing.md runs as pasted,
// from the root of the clone: a newcomer's first run of the psql recipe.
func TestTryItBlockRunsAsPasted(t *testing.T) {
	for _, tool := range []string{"postgres", "initdb", "pg_isready", "psql"} {
		toolPath(t, tool) // fails, naming the package, when one is missing
	}
	doc, err := os.ReadFile(filepath.Join(repo, "docs/fencing.md"))
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(doc), "### Try it on one machine\n")
	require.True(t, ok, "docs/fencing.md has no Try it section")
	_, block, ok := strings.Cut(section, "```sh\n")
	require.True(t, ok)
	block, _, ok = strings.Cut(block, "```\n")
	require.True(t, ok)

	cmd := exec.Command("bash", "-e", "-c", block)
	cmd.Dir = repo
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "MONOLOCK_") || strings.HasPrefix(kv, "PG")
	})
	// Its own group: what a failed run leaves behind goes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = time.Second
	t.Cleanup(func() {
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	})
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Regexp(t, `(?m)^\s*1 \| report of .+\| +1$`, string(out), "the report row, written with token 1")
}
