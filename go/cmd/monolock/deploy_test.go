package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/monolock/monolock/go/internal/testetcd"
)

// The files of deploy/ are checked against the real server: the metrics
// that the alert rules and the dashboard use exist, and the flags and
// environment that the systemd unit and the container pass are accepted
// by `monolock serve --check-config`.

// repoFile is a path relative to the repository's root.
func repoFile(rel string) string { return filepath.Join("..", "..", "..", filepath.FromSlash(rel)) }

// metricFamilies scrapes adminAddr's /metrics and returns each family's
// name with its type, and every series line's label pairs by family.
func metricFamilies(t *testing.T, adminAddr string, fams map[string]string, labels map[string]bool) {
	t.Helper()
	resp, err := http.Get("http://" + adminAddr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	typeLine := regexp.MustCompile(`^# TYPE (\S+) (\S+)$`)
	series := regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} `)
	pair := regexp.MustCompile(`(\w+)="([^"]*)"`)
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		if m := typeLine.FindStringSubmatch(sc.Text()); m != nil {
			fams[m[1]] = m[2]
		}
		if m := series.FindStringSubmatch(sc.Text()); m != nil {
			for _, p := range pair.FindAllStringSubmatch(m[2], -1) {
				labels[m[1]+"{"+p[1]+"="+p[2]+"}"] = true
			}
		}
	}
}

// knownMetric says whether name is a scraped family or one of a
// histogram's (or summary's) _bucket, _sum and _count series.
func knownMetric(fams map[string]string, name string) bool {
	if _, ok := fams[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if typ := fams[base]; ok && (typ == "histogram" || (typ == "summary" && suffix != "_bucket")) {
			return true
		}
	}
	return false
}

// A metric reference in PromQL: a name of ours or of the standard process
// collector, and its label matchers if any.
var (
	metricRef = regexp.MustCompile(`\b((?:monolock|process|go)_[a-zA-Z0-9_]+)(\{[^}]*\})?`)
	eqMatcher = regexp.MustCompile(`(\w+)="([^"$]*)"`)
)

// checkExpr reports every metric of expr the server does not export, and
// every label value matched with = that no scraped series has.
func checkExpr(t *testing.T, where, expr string, fams map[string]string, labels map[string]bool) int {
	t.Helper()
	refs := metricRef.FindAllStringSubmatch(expr, -1)
	for _, m := range refs {
		assert.True(t, knownMetric(fams, m[1]), "%s: %s is not in the server's /metrics (expr %q)", where, m[1], expr)
		family := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m[1], "_bucket"), "_sum"), "_count")
		for _, lm := range eqMatcher.FindAllStringSubmatch(m[2], -1) {
			if lm[1] == "job" || lm[1] == "instance" {
				continue // set by the scrape, not by the server
			}
			assert.True(t, labels[family+"{"+lm[1]+"="+lm[2]+"}"] || labels[m[1]+"{"+lm[1]+"="+lm[2]+"}"],
				"%s: no series %s{%s=%q} in /metrics", where, m[1], lm[1], lm[2])
		}
	}
	return len(refs)
}

// Every metric that deploy/prometheus/monolock-alerts.yml and
// deploy/grafana/monolock.json use is in the /metrics output of a real
// server: a plain one and one of an HA cell, which adds the monolock_ha_
// gauges.
func TestDeployMetricsExist(t *testing.T) {
	fams, labels := map[string]string{}, map[string]bool{}
	plain := startServe(t, nil, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0")
	metricFamilies(t, plain.admin, fams, labels)

	etcd := testetcd.Start(t)
	adminHA := testetcd.FreePort(t)
	ha := cellServer(t, etcd, testetcd.FreePort(t), adminHA)
	ha.WaitLog(0, wait, "ha: leading the cell")
	ha.WaitLog(0, wait, "admin listening")
	metricFamilies(t, adminHA, fams, labels)
	require.Contains(t, fams, "monolock_ha_active")
	require.Contains(t, fams, "process_open_fds", "the standard process collector")
	require.Contains(t, fams, "monolock_max_sessions", "--max-sessions, for the sessions-near-the-limit alert")

	// The alert rules.
	var rules struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert  string            `yaml:"alert"`
				Expr   string            `yaml:"expr"`
				For    string            `yaml:"for"`
				Labels map[string]string `yaml:"labels"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	b, err := os.ReadFile(repoFile("deploy/prometheus/monolock-alerts.yml"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, &rules))
	names := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Alert, "group %s: a rule without an alert name", g.Name)
			assert.False(t, names[r.Alert], "alert %s twice", r.Alert)
			names[r.Alert] = true
			assert.NotEmpty(t, r.Labels["severity"], "%s: severity label", r.Alert)
			if r.For != "" {
				_, err := time.ParseDuration(r.For)
				assert.NoError(t, err, "%s: for", r.Alert)
			}
			n := checkExpr(t, "alert "+r.Alert, r.Expr, fams, labels)
			if r.Alert == "MonolockSessionsNearLimit" {
				// Sessions against --max-sessions, not descriptors against
				// the file limit: the server's own numbers.
				assert.Contains(t, r.Expr, `(monolock_sessions{job="monolock"} + monolock_held_back_holders{job="monolock"}) / monolock_max_sessions{job="monolock"}`, "held-back holders take places too")
			}
			if r.Alert != "MonolockDown" { // up{} is Prometheus's own
				assert.NotZero(t, n, "%s: uses no metric of the server", r.Alert)
			}
		}
	}
	for _, want := range []string{"MonolockDown", "MonolockNotReadyForLong", "MonolockTokenReservationFailures",
		"MonolockRestartWait", "MonolockSessionsNearLimit", "MonolockHANoLeader"} {
		assert.True(t, names[want], "alert %s", want)
	}

	// The dashboard: every panel's queries, and the variables' queries.
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	b, err = os.ReadFile(repoFile("deploy/grafana/monolock.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &dash))
	require.NotEmpty(t, dash.Panels)
	limitPanel := false
	for _, p := range dash.Panels {
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, tg := range p.Targets {
			limitPanel = limitPanel || strings.HasPrefix(tg.Expr, "monolock_max_sessions{")
		}
		for _, tg := range p.Targets {
			assert.NotZero(t, checkExpr(t, "panel "+p.Title, tg.Expr, fams, labels), "panel %q: %q", p.Title, tg.Expr)
		}
	}
	assert.True(t, limitPanel, "a panel shows monolock_max_sessions")
	for _, v := range dash.Templating.List {
		checkExpr(t, "variable "+v.Name, v.Definition, fams, labels)
	}
}

// systemdUnit reads a unit file: its Key=Value lines, with backslash
// continuations joined, in order.
func systemdUnit(t *testing.T, path string) [][2]string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var out [][2]string
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' || line[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		require.True(t, ok, "%s: %q", path, line)
		out = append(out, [2]string{k, strings.TrimSpace(v)})
	}
	return out
}

func unitValue(unit [][2]string, key string) string {
	for _, kv := range unit {
		if kv[0] == key {
			return kv[1]
		}
	}
	return ""
}

// envFile reads KEY=VALUE lines (as systemd's EnvironmentFile and docker's
// --env-file take them), replacing old by new in every value.
func envFile(t *testing.T, path string, replace *strings.Replacer) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var env []string
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line == "" || line[0] == '#' {
			continue
		}
		require.Contains(t, line, "=", "%s: %q", path, line)
		env = append(env, replace.Replace(line))
	}
	return env
}

// installedFiles makes, under root, the files the deploy examples name: a
// PKI from monolock certs, an ACL and an admin token.
func installedFiles(t *testing.T, root string) {
	t.Helper()
	pki := filepath.Join(root, "etc", "monolock", "pki")
	certs(t, "init", pki)
	certs(t, "server", "--dir", pki, "--host", "127.0.0.1", "--host", "lock.example.com")
	require.NoError(t, os.WriteFile(filepath.Join(root, "etc", "monolock", "acl"), []byte("cn:deployer deploy/*\n"), 0o640))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "run", "secrets"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(root, "run", "secrets", "monolock-admin-token"), []byte("s3cret\n"), 0o600))
}

// The systemd unit: its ExecStartPre and ExecStart lines, with the
// installed environment file, pass --check-config (with the paths moved
// under a temporary directory); the two lines agree, and the unit has
// what docs/operating.md promises.
func TestDeploySystemdUnit(t *testing.T) {
	unit := systemdUnit(t, repoFile("deploy/systemd/monolock.service"))
	root := t.TempDir()
	installedFiles(t, root)
	state := filepath.Join(root, "var", "lib", "monolock")
	moved := strings.NewReplacer("${STATE_DIRECTORY}", state, "/etc/monolock/", filepath.Join(root, "etc", "monolock")+"/",
		"/usr/local/bin/monolock", binary)
	assert.Equal(t, "-/etc/monolock/env", unitValue(unit, "EnvironmentFile"))
	env := envFile(t, repoFile("deploy/systemd/monolock.env"), moved)

	start, pre := unitValue(unit, "ExecStart"), unitValue(unit, "ExecStartPre")
	require.NotEmpty(t, start)
	assert.Equal(t, strings.Replace(start, " serve ", " serve --check-config ", 1), pre,
		"ExecStartPre checks what ExecStart runs")
	for _, line := range []string{start + " --check-config", pre} {
		args := strings.Fields(moved.Replace(line))
		require.Equal(t, binary, args[0], "%s: the installed binary", line)
		for _, a := range args {
			assert.NotContains(t, a, "${", "%s: a variable the test does not set", line)
		}
		code, stdout, stderr := command(t, env, args[1:]...)
		require.Equal(t, 0, code, "%s: %s", line, stderr)
		assert.Contains(t, stdout, "configuration OK")
		assert.Contains(t, stdout, "listen      0.0.0.0:7117 (mutual TLS")
		assert.Contains(t, stdout, "data dir    "+state)
	}
	_, err := os.Stat(state)
	assert.True(t, os.IsNotExist(err), "--check-config creates no data directory")

	assert.Equal(t, "monolock", unitValue(unit, "StateDirectory"), "StateDirectory gives ${STATE_DIRECTORY}")
	assert.Equal(t, "on-failure", unitValue(unit, "Restart"))
	assert.Equal(t, "/bin/kill -HUP $MAINPID", unitValue(unit, "ExecReload"), "SIGHUP reloads the ACL and TLS files")
	assert.NotEmpty(t, unitValue(unit, "LimitNOFILE"))
	assert.NotEmpty(t, unitValue(unit, "User"), "not root")
	assert.Equal(t, "yes", unitValue(unit, "NoNewPrivileges"))
	assert.Equal(t, "strict", unitValue(unit, "ProtectSystem"))
	stop, err := time.ParseDuration(unitValue(unit, "TimeoutStopSec"))
	require.NoError(t, err)
	drain := defaultDrainTimeout
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "MONOLOCK_DRAIN_TIMEOUT="); ok {
			drain, err = time.ParseDuration(v)
			require.NoError(t, err)
		}
	}
	assert.Greater(t, stop, drain, "TimeoutStopSec leaves room for the drain")
}

// dockerfile reads a Containerfile's instructions, continuation lines
// joined: each is the keyword and the rest.
func dockerfile(t *testing.T, path string) [][2]string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var out [][2]string
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		if line = strings.TrimSpace(line); line == "" || line[0] == '#' {
			continue
		}
		k, v, _ := strings.Cut(line, " ")
		out = append(out, [2]string{strings.ToUpper(k), strings.TrimSpace(v)})
	}
	return out
}

// The container file, statically (no container runtime in the tests):
// what it copies from the build context and builds exists, its final
// stage runs as a non-root user, it exposes the ports it listens on, and
// its ENTRYPOINT, CMD and ENV pass --check-config with the volume and the
// secret moved under a temporary directory.
func TestDeployContainerfile(t *testing.T) {
	ins := dockerfile(t, repoFile("deploy/Containerfile"))
	root := t.TempDir()
	installedFiles(t, root)
	moved := strings.NewReplacer("/var/lib/monolock", filepath.Join(root, "var", "lib", "monolock"),
		"/run/secrets/", filepath.Join(root, "run", "secrets")+"/")

	var env, entrypoint, cmd []string
	var user string
	var exposed []string
	stages := 0
	for _, in := range ins {
		k, v := in[0], in[1]
		switch k {
		case "FROM":
			stages++
			user, env = "", nil // what counts is the final stage's
		case "COPY":
			f := strings.Fields(v)
			if strings.HasPrefix(f[0], "--from=") || strings.HasPrefix(f[0], "--chown=") && strings.HasPrefix(f[1], "--from=") {
				continue
			}
			for _, src := range f[:len(f)-1] {
				if !strings.HasPrefix(src, "--") {
					_, err := os.Stat(repoFile(src))
					assert.NoError(t, err, "COPY %s: not in the build context (the repository's root)", src)
				}
			}
		case "RUN":
			// The build runs in /src, which holds go/.
			if _, pkg, ok := strings.Cut(v, " ./cmd/"); ok {
				_, err := os.Stat(repoFile("go/cmd/" + strings.Fields(pkg)[0]))
				assert.NoError(t, err, "RUN %s: the package it builds", v)
			}
		case "USER":
			user = v
		case "ENV":
			for _, kv := range strings.Fields(v) {
				env = append(env, moved.Replace(kv))
			}
		case "EXPOSE":
			exposed = strings.Fields(v)
		case "ENTRYPOINT":
			require.NoError(t, json.Unmarshal([]byte(v), &entrypoint), "ENTRYPOINT in exec form")
		case "CMD":
			require.NoError(t, json.Unmarshal([]byte(v), &cmd), "CMD in exec form")
		}
	}
	assert.Equal(t, 2, stages, "a build stage and a runtime stage")
	assert.NotEmpty(t, user)
	assert.NotContains(t, []string{"root", "0", "0:0"}, user, "runs as non-root")
	require.Equal(t, []string{"/monolock"}, entrypoint)

	args := append([]string{}, cmd...)
	for i := range args {
		args[i] = moved.Replace(args[i])
	}
	code, stdout, stderr := command(t, env, append(args, "--check-config")...)
	require.Equal(t, 0, code, "CMD %v with ENV %v: %s", cmd, env, stderr)
	assert.Contains(t, stdout, "configuration OK")
	assert.Contains(t, stdout, "admin       0.0.0.0:7118 (tls false, token true)")
	for _, kv := range env {
		for _, key := range []string{"MONOLOCK_LISTEN=", "MONOLOCK_ADMIN="} {
			if addr, ok := strings.CutPrefix(kv, key); ok {
				port := addr[strings.LastIndex(addr, ":")+1:]
				assert.Contains(t, exposed, port, "EXPOSE the port of %s", key)
			}
		}
	}

	// Without the secret the server would refuse to start, and says why.
	code, _, stderr = command(t, append(env, "MONOLOCK_ADMIN_TOKEN_FILE="+filepath.Join(root, "missing")),
		append(args, "--check-config")...)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, fmt.Sprintf("--admin-token-file: open %s", filepath.Join(root, "missing")))
}
