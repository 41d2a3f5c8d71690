package fencing_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// psqlRecipe is the command of docs/fencing.md's shell recipe, which
// monolock run runs as sh -c '<psqlRecipe>' in this directory.
const psqlRecipe = `psql -X -q -v ON_ERROR_STOP=1 --single-transaction -v name="$MONOLOCK_NAME" -v token="$MONOLOCK_TOKEN" -v body="$REPORT_BODY" -f write-report.sql`

// reportTable is the table write-report.sql writes to.
const reportTable = `CREATE TABLE report (id int PRIMARY KEY, body text NOT NULL, token numeric(20, 0) NOT NULL)`

// psqlEnv is the environment of a recipe run against the database of url:
// psql finds it through the PG* variables, and the psql of
// scripts/system-tools.tsv comes first on PATH.
func psqlEnv(t *testing.T, url string, extra ...string) []string {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	psql := toolPath(t, "psql")
	env := append(os.Environ(),
		"PATH="+filepath.Dir(psql)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"PGHOST="+cfg.Host, "PGPORT="+strconv.Itoa(int(cfg.Port)),
		"PGUSER="+cfg.User, "PGDATABASE="+cfg.Database, "PGCONNECT_TIMEOUT=10")
	return append(env, extra...)
}

func reportDatabase(t *testing.T) (url string, conn *pgx.Conn) {
	t.Helper()
	url = database(t)
	conn = connect(t, url)
	_, err := conn.Exec(ctx(t), reportTable)
	require.NoError(t, err)
	return url, conn
}

// report is what the report table holds: its body and the token of the
// write, "" and 0 before any.
func report(t *testing.T, conn *pgx.Conn) (body string, token uint64) {
	t.Helper()
	var tok string
	err := conn.QueryRow(ctx(t), `SELECT body, token::text FROM report WHERE id = 1`).Scan(&body, &tok)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0
	}
	require.NoError(t, err)
	token, err = strconv.ParseUint(tok, 10, 64)
	require.NoError(t, err)
	return body, token
}

// The recipe alone, with the tokens of holders that woke up late.
func TestPsqlRecipeInterleavedTokens(t *testing.T) {
	url, conn := reportDatabase(t)
	for _, step := range []struct {
		token uint64
		ok    bool
	}{{5, true}, {7, true}, {6, false}, {7, true}, {8, true}, {5, false}} {
		body := "from token " + strconv.FormatUint(step.token, 10)
		before, beforeToken := report(t, conn)
		cmd := exec.Command("sh", "-c", psqlRecipe)
		cmd.Env = psqlEnv(t, url, "MONOLOCK_NAME=jobs/report", "MONOLOCK_TOKEN="+strconv.FormatUint(step.token, 10), "REPORT_BODY="+body)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		got, gotToken := report(t, conn)
		if step.ok {
			require.NoError(t, err, "token %d: %s", step.token, stderr.String())
			require.Equal(t, body, got)
			require.Equal(t, step.token, gotToken)
			continue
		}
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "token %d was not refused", step.token)
		require.Equal(t, 3, exit.ExitCode(), "psql's status for an error in a script: %s", stderr.String())
		require.Contains(t, stderr.String(), "stale fencing token "+strconv.FormatUint(step.token, 10)+" for lock jobs/report: "+strconv.FormatUint(beforeToken, 10)+" was seen")
		require.Equal(t, before, got)
		require.Equal(t, beforeToken, gotToken)
	}
}

// Under monolock run, with tokens of a real server: run 1 holds the lock
// and has its write under way when an operator kicks it. The server grants
// the lock to run 2 at once, which writes, while run 1's command is still
// within its --grace (it ignores the SIGTERM, as a write in flight cannot
// be called back). Then run 1's write goes out with the old token: psql is
// refused, nothing changes, and monolock run exits 79 for the lost lock.
func TestPsqlRecipeUnderMonolockRun(t *testing.T) {
	url, conn := reportDatabase(t)
	srv := startMonolock(t)
	bin := monolockBinary(t)
	dir := t.TempDir()
	held, gate := filepath.Join(dir, "held"), filepath.Join(dir, "gate")

	// The write in flight: told of the loss by SIGTERM, it goes on. A grace
	// of a minute needs a lease of 5 minutes or more (see monolock run).
	pause := `trap '' TERM; echo "$MONOLOCK_TOKEN" >"$HELD"; i=0; while [ ! -e "$GATE" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; `
	run1 := exec.CommandContext(ctx(t), bin, "run", "--server", srv.addr, "--lease", "10m", "--grace", "1m", "jobs/report", "--", "sh", "-c", pause+psqlRecipe)
	run1.Env = psqlEnv(t, url, "REPORT_BODY=from run 1", "HELD="+held, "GATE="+gate)
	var stderr1 bytes.Buffer
	run1.Stderr = &stderr1
	require.NoError(t, run1.Start())
	exited1 := make(chan struct{})
	go func() { _ = run1.Wait(); close(exited1) }()
	var token1 uint64
	waitFor(t, "token of run 1", func() bool {
		select {
		case <-exited1:
			t.Fatalf("run 1 exited early: %s", stderr1.String())
		default:
		}
		b, err := os.ReadFile(held)
		if err != nil || !bytes.HasSuffix(b, []byte("\n")) {
			return false
		}
		token1, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		require.NoError(t, err)
		return true
	})

	run2 := exec.CommandContext(ctx(t), bin, "run", "--server", srv.addr, "jobs/report", "--", "sh", "-c", psqlRecipe)
	run2.Env = psqlEnv(t, url, "REPORT_BODY=from run 2")
	var stderr2 bytes.Buffer
	run2.Stderr = &stderr2
	require.NoError(t, run2.Start())

	require.Equal(t, token1, srv.kickHolder(t, "jobs/report"))
	require.NoError(t, run2.Wait(), "run 2: %s", stderr2.String())
	body, token2 := report(t, conn)
	require.Equal(t, "from run 2", body)
	require.Greater(t, token2, token1)

	require.NoError(t, os.WriteFile(gate, nil, 0o644))
	<-exited1
	require.Equal(t, 79, run1.ProcessState.ExitCode(), "run 1: %s", stderr1.String())
	require.Contains(t, stderr1.String(), "stale fencing token "+strconv.FormatUint(token1, 10)+" for lock jobs/report: "+strconv.FormatUint(token2, 10)+" was seen")
	body, token := report(t, conn)
	require.Equal(t, "from run 2", body)
	require.Equal(t, token2, token)
}
