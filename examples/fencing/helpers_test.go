package fencing_test

// What the tests run against: PostgreSQL and Redis started by
// scripts/services.sh (the launcher the Python tests use too), and a real
// `monolock serve` for the tokens.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/monolock/monolock/examples/fencing"
	"github.com/monolock/monolock/go/testkit/launch"
)

// wait bounds every wait of these tests.
const wait = 30 * time.Second

var repo = func() string {
	dir, err := filepath.Abs("../..")
	if err != nil {
		panic(err)
	}
	return dir
}()

// The services are started once, by the first test that needs each, and
// stopped by TestMain.
var (
	servicesMu  sync.Mutex
	servicesDir string
	ports       = map[string]int{}
	startErrs   = map[string]error{}

	monolockBin string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "monolock-fencing-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	servicesDir = dir
	code := m.Run()
	if out, err := exec.Command("bash", filepath.Join(repo, "scripts/services.sh"), "stop", dir).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "services.sh stop: %v\n%s", err, out)
		code = 1
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// service returns the port of the test run's kind server ("postgres" or
// "redis"), starting it the first time. A tool that is missing fails the
// test with services.sh's message, which names the package to install.
func service(t *testing.T, kind string) int {
	t.Helper()
	servicesMu.Lock()
	defer servicesMu.Unlock()
	if _, tried := ports[kind]; !tried && startErrs[kind] == nil {
		var stderr bytes.Buffer
		cmd := exec.Command("bash", filepath.Join(repo, "scripts/services.sh"), "start", kind, servicesDir)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err == nil {
			ports[kind], err = strconv.Atoi(strings.TrimSpace(string(out)))
		}
		if err != nil {
			startErrs[kind] = fmt.Errorf("services.sh start %s: %v\n%s", kind, err, stderr.String())
		}
	}
	if err := startErrs[kind]; err != nil {
		t.Fatal(err)
	}
	return ports[kind]
}

// toolPath is where the system tool name of scripts/system-tools.tsv is,
// asked of scripts/lib/system-tools.sh (this module cannot import the go
// module's internal/testtools); a tool that is missing or not on the list
// fails the test with that helper's message.
func toolPath(t *testing.T, name string) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command("bash", "-c", `source "$1" && tool_path "$2"`, "_", filepath.Join(repo, "scripts/lib/system-tools.sh"), name)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", strings.TrimSpace(stderr.String()), err)
	}
	return strings.TrimSpace(string(out))
}

var dbSeq struct {
	sync.Mutex
	n int
}

// database creates a database of its own for the test in the shared
// PostgreSQL, with fence.sql installed, and returns its connection URL.
func database(t *testing.T) string {
	t.Helper()
	port := service(t, "postgres")
	dbSeq.Lock()
	dbSeq.n++
	name := fmt.Sprintf("fencing_%d", dbSeq.n)
	dbSeq.Unlock()
	admin := connect(t, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres", port))
	if _, err := admin.Exec(ctx(t), "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s", port, name)
	if _, err := connect(t, url).Exec(ctx(t), fencing.Schema); err != nil {
		t.Fatalf("installing fence.sql: %v", err)
	}
	return url
}

// connect opens a connection that the test closes when it ends.
func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx(t), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// ctx is bounded by wait and ends with the test.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), wait)
	t.Cleanup(cancel)
	return c
}

// server is a running `monolock serve` with its admin API.
type server struct {
	addr, admin string
}

// startMonolock starts `monolock serve` on loopback ports of the kernel's
// choice, for the test: $MONOLOCK_BIN, else a build of ../../go. Its
// addresses come from its ready file (launch.Start).
func startMonolock(t *testing.T) server {
	t.Helper()
	bin := monolockBinary(t)
	cmd := launch.Command(bin, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--data-dir", t.TempDir())
	log := &lockedBuffer{}
	cmd.Stderr = log
	srv, err := launch.Start(context.Background(), cmd, launch.Options{Wait: wait})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Kill()
		if t.Failed() {
			t.Logf("monolock serve log:\n%s", log.String())
		}
	})
	return server{addr: srv.LockAddr, admin: srv.AdminAddr}
}

// lockedBuffer is the server's log, written by exec's copier and read by
// the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var buildOnce sync.Once

func monolockBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("MONOLOCK_BIN"); bin != "" {
		return bin
	}
	var err error
	buildOnce.Do(func() {
		bin := filepath.Join(servicesDir, "monolock")
		cmd := exec.Command("go", "build", "-o", bin, "./cmd/monolock")
		cmd.Dir = filepath.Join(repo, "go")
		var out []byte
		if out, err = cmd.CombinedOutput(); err != nil {
			err = fmt.Errorf("building monolock: %v\n%s", err, out)
			return
		}
		monolockBin = bin
	})
	if monolockBin == "" {
		t.Fatalf("no monolock binary: %v", err)
	}
	return monolockBin
}

// kickHolder ends the session that holds the lock name through the admin
// API, as `monolock kick` does, and returns its token.
func (s server) kickHolder(t *testing.T, name string) uint64 {
	t.Helper()
	var locks struct {
		Locks []struct {
			Name   string
			Holder *struct {
				Session uint64
				Token   uint64
			}
		}
	}
	resp, err := http.Get("http://" + s.admin + "/v1/locks")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&locks); err != nil {
		t.Fatal(err)
	}
	for _, l := range locks.Locks {
		if l.Name != name || l.Holder == nil {
			continue
		}
		kick, err := http.Post(fmt.Sprintf("http://%s/v1/sessions/%d/kick", s.admin, l.Holder.Session), "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		kick.Body.Close()
		if kick.StatusCode != http.StatusOK {
			t.Fatalf("kick: %s", kick.Status)
		}
		return l.Holder.Token
	}
	t.Fatalf("nobody holds %s: %+v", name, locks)
	return 0
}

// waitFor polls cond every 20 ms until it holds, failing the test after wait.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
