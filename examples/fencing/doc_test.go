package fencing_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

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
