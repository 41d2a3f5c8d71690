package testtools

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTheListIsWellFormed(t *testing.T) {
	tools, err := List()
	require.NoError(t, err)
	require.NotEmpty(t, tools)
	seen := map[string]bool{}
	for _, tool := range tools {
		assert.False(t, seen[tool.Name], "%s is listed twice", tool.Name)
		seen[tool.Name] = true
		assert.NotEmpty(t, tool.Package, tool.Name)
		assert.Contains(t, []string{"test", "bench"}, tool.Group, tool.Name)
	}
	// The tools the Go tests ask for are on it.
	for _, name := range []string{"etcd", "ip"} {
		assert.True(t, seen[name], "%s is not listed", name)
	}
}

func TestAProgramNotOnTheListIsRefusedEvenWhenInstalled(t *testing.T) {
	_, err := os.Stat("/bin/sh")
	require.NoError(t, err, "the test needs an installed program that is not listed")
	_, err = Lookup("sh")
	require.ErrorIs(t, err, ErrNotListed)
	assert.Contains(t, err.Error(), "sh is not on scripts/system-tools.tsv: declare it there")
}

func TestAMissingProgramNamesItsPackageAndTheInstallCommand(t *testing.T) {
	tools := []Tool{
		{Name: "monolock-no-such-program", Package: "monolock-test-package", Group: "test"},
		{Name: "no-such.jar", Package: "monolock-bench-package", Path: "/nonexistent/no-such.jar", Group: "bench"},
	}
	_, err := lookup(tools, "monolock-no-such-program")
	require.Error(t, err)
	assert.Equal(t, "monolock-no-such-program is not installed (Debian package monolock-test-package): "+
		"run go run mage.go deps (apt-get install monolock-test-package)", err.Error())
	_, err = lookup(tools, "no-such.jar")
	require.Error(t, err)
	assert.Equal(t, "no-such.jar is not installed (no /nonexistent/no-such.jar; Debian package monolock-bench-package): "+
		"run bash bench/scripts/peers.sh install (apt-get install monolock-bench-package)", err.Error())
	assert.False(t, errors.Is(err, ErrNotListed))
}

func TestAnInstalledProgramIsFoundWhereTheListSays(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "monolock-test-tool")
	require.NoError(t, os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755))
	t.Setenv("PATH", dir)
	tools := []Tool{
		{Name: "monolock-test-tool", Package: "p", Group: "test"},
		{Name: "at-a-path", Package: "p", Path: prog, Group: "test"},
	}
	got, err := lookup(tools, "monolock-test-tool")
	require.NoError(t, err)
	assert.Equal(t, prog, got)
	got, err = lookup(tools, "at-a-path")
	require.NoError(t, err)
	assert.Equal(t, prog, got)
}

func TestAMalformedRowIsAnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tools.tsv")
	require.NoError(t, os.WriteFile(path, []byte("# comment\nname\tpackage\tpath\tgroup\tused by\netcd etcd-server - test x\n"), 0o644))
	_, err := readList(path)
	require.Error(t, err)
	assert.Contains(t, err.Error(), ":3: 1 columns, want 5")
}
