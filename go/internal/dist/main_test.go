package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTargetsCoverTheReleaseMatrix(t *testing.T) {
	var got []string
	for _, tg := range Targets {
		got = append(got, tg.OS+"/"+tg.Arch)
	}
	assert.ElementsMatch(t, []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64",
		"windows/amd64", "windows/arm64"}, got)
	assert.Equal(t, "monolock_v1_windows_arm64.exe", BinaryName("v1", Target{"windows", "arm64"}))
	_, err := selectTargets("plan9/mips")
	assert.Error(t, err)
}

// Building the host's target embeds the version and records the checksum.
func TestBuildEmbedsVersion(t *testing.T) {
	host := runtime.GOOS + "/" + runtime.GOARCH
	if _, err := selectTargets(host); err != nil {
		t.Skipf("host %s is not a release target", host) // only on exotic hosts; CI is linux/amd64
	}
	out := t.TempDir()
	wd, err := os.Getwd()
	require.NoError(t, err)
	require.NoError(t, os.Chdir(filepath.Join(wd, "..", "..")))
	defer os.Chdir(wd)
	require.NoError(t, run("v9.9.9-test", out, host))

	bin := filepath.Join(out, BinaryName("v9.9.9-test", Target{runtime.GOOS, runtime.GOARCH}))
	version, err := exec.Command(bin, "version").Output()
	require.NoError(t, err)
	assert.Equal(t, "monolock v9.9.9-test\n", string(version))
	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(strings.TrimSpace(string(sums)), filepath.Base(bin)), string(sums))
}
