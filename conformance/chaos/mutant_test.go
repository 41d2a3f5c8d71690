package chaos

// The proof that the harness can fail on a semaphore: a client that lets
// one holder too many in (conformance/mutants/semaphore-limit-plus-one,
// which sends a semaphore's limit plus one) must be reported, and the
// mutants' base client without the bug, in the same run, must not.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/conformance/runner"
	"github.com/monolock/monolock/go/testkit/cell"
)

func TestAnalyserCatchesSemaphoreLimitPlusOne(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	root, err := runner.FindRoot(".")
	require.NoError(t, err)
	bins := t.TempDir() // not bin/: the mutants' test builds there at the same time
	server := os.Getenv("MONOLOCK_BIN")
	if server == "" {
		server = goBuild(t, ctx, filepath.Join(root, "go"), filepath.Join(bins, "monolock"), "./cmd/monolock")
	}
	client := func(name, pkg string) runner.Client {
		bin := goBuild(t, ctx, filepath.Join(root, "conformance"), filepath.Join(bins, name), pkg)
		return runner.Client{Name: name, Dir: "conformance", Run: []string{bin}}
	}
	mutant := client("limit-plus-one", "./mutants/semaphore-limit-plus-one")
	base := client("base", "./mutants/base")

	// Four workers on a semaphore of two, every claim a permit: the bug
	// lets a third holder in at once; the base leaves two waiting. Link
	// delays are the one fault, mild enough that the base's run is clean.
	sem := Lock{Name: "chaos/semaphore-2", Limit: 2}
	run := func(c runner.Client) *Report {
		cl, err := StartCell(ctx, cell.Options{Bin: server, Dir: t.TempDir(), Servers: 1})
		require.NoError(t, err)
		defer cl.Close()
		var log strings.Builder
		rep, err := Run(ctx, Config{
			Root: root, Clients: []runner.Client{c, c, c, c}, Locks: []Lock{sem}, Cell: cl,
			Lease: time.Second, Duration: 6 * time.Second, Faults: []string{FaultDelay}, Seed: 1, Log: &log,
		})
		require.NoError(t, err)
		rep.Write(&log)
		t.Logf("%s:\n%s", c.Name, log.String())
		return rep
	}

	rep := run(mutant)
	require.NotEmpty(t, rep.Breaches, "the mutant's third permit holder went unseen")
	for _, b := range rep.Breaches {
		assert.Greater(t, b.Most, sem.Limit)
		for _, h := range b.Holders {
			assert.True(t, h.Shared, "every claim of the run is a permit")
		}
	}
	assert.Contains(t, strings.Join(rep.Violations(), "\n"), "3 holders of chaos/semaphore-2 at once")
	assert.Zero(t, rep.HolderFenced+rep.StaleAccepted+rep.OutOfOrder,
		"its tokens are in order: only the count of holders catches it")

	rep = run(base)
	assert.Empty(t, rep.Violations())
	require.Len(t, rep.Locks, 1)
	assert.Equal(t, sem.Limit, rep.Locks[0].MostAtOnce, "the permits were all taken: a third holder would have been seen")
}

// goBuild builds pkg of the module in dir into out.
func goBuild(t *testing.T, ctx context.Context, dir, out, pkg string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = dir
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build %s: %s", pkg, b)
	return out
}

// The proof that the harness can fail on an election's watchers: a
// client that keeps showing the last leader it saw after its watch went
// silent (conformance/mutants/stale-leader-after-silence) is reported
// under blackholed links, and the mutants' base client is not.
func TestAnalyserCatchesAStaleLeader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	root, err := runner.FindRoot(".")
	require.NoError(t, err)
	bins := t.TempDir()
	server := os.Getenv("MONOLOCK_BIN")
	if server == "" {
		server = goBuild(t, ctx, filepath.Join(root, "go"), filepath.Join(bins, "monolock"), "./cmd/monolock")
	}
	client := func(name, pkg string) runner.Client {
		bin := goBuild(t, ctx, filepath.Join(root, "conformance"), filepath.Join(bins, name), pkg)
		return runner.Client{Name: name, Dir: "conformance", Run: []string{bin}}
	}
	election := Lock{Name: "chaos/leader", Exclusive: 1, Election: true}
	run := func(c runner.Client) *Report {
		cl, err := StartCell(ctx, cell.Options{Bin: server, Dir: t.TempDir(), Servers: 1})
		require.NoError(t, err)
		defer cl.Close()
		var log strings.Builder
		rep, err := Run(ctx, Config{
			Root: root, Clients: []runner.Client{c, c, c}, Locks: []Lock{election}, Cell: cl,
			Lease: time.Second, Duration: 12 * time.Second, Faults: []string{FaultBlackhole}, Seed: 3, Log: &log,
		})
		require.NoError(t, err)
		rep.Write(&log)
		t.Logf("%s:\n%s", c.Name, log.String())
		return rep
	}

	rep := run(client("stale-leader", "./mutants/stale-leader-after-silence"))
	assert.Contains(t, strings.Join(rep.Violations(), "\n"), "as leader until", "the stale leader went unseen")
	assert.Empty(t, rep.Breaches, "its terms never overlap: only its watch is wrong")

	rep = run(client("base", "./mutants/base"))
	assert.Empty(t, rep.Violations())
	require.Len(t, rep.Elections, 1)
	assert.NotZero(t, rep.Elections[0].Observations)
}
