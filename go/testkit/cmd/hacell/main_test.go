package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/testbin"
	"github.com/monolock/monolock/go/internal/testetcd"
	"github.com/monolock/monolock/go/internal/testtools"
)

var pidRE = regexp.MustCompile(`\(pid (\d+)`)

// serverRE reads a server's line: its pid and its admin address.
var serverRE = regexp.MustCompile(`^ha: server \S+ \(pid (\d+), admin (\S+),`)

// The cell is usable the moment the try line is printed (its first command
// gets the lock, not "not the active server"), the admin API answers
// `monolock locks`, and SIGTERM or SIGINT to the command stops every etcd
// member and server it printed the pid of.
func TestStopsEverythingOnSignal(t *testing.T) {
	testtools.Require(t, "etcd")
	mono := testbin.Binary(t)
	hacell := filepath.Join(t.TempDir(), "hacell")
	out, err := exec.Command("go", "build", "-o", hacell, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)

	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			var addrs, admins []string
			for range 3 {
				addrs, admins = append(addrs, testetcd.FreePort(t)), append(admins, testetcd.FreePort(t))
			}
			cmd := exec.Command(hacell, "-bin", mono, "-listen", strings.Join(addrs, ","),
				"-admin", strings.Join(admins, ","), "-etcd-base-port", "0")
			stdout, err := cmd.StdoutPipe()
			require.NoError(t, err)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			require.NoError(t, cmd.Start())
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			t.Cleanup(func() { _ = cmd.Process.Kill() })

			// Read up to the try line, collecting pids, within a bound.
			lines := make(chan string)
			go func() {
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
					lines <- sc.Text()
				}
				close(lines)
			}()
			var pids []int
			var leaderAdmin string
			serverPIDs := map[string]int{} // admin address -> pid
			deadline := time.After(90 * time.Second)
		read:
			for {
				select {
				case line, ok := <-lines:
					require.True(t, ok, "hacell ended before its try line; stderr:\n%s", stderr.String())
					t.Log(line)
					for _, m := range pidRE.FindAllStringSubmatch(line, -1) {
						pid, _ := strconv.Atoi(m[1])
						pids = append(pids, pid)
					}
					if m := serverRE.FindStringSubmatch(line); m != nil {
						serverPIDs[m[2]], _ = strconv.Atoi(m[1])
					}
					if a, ok := strings.CutPrefix(line, "ha: and: "+mono+" locks --admin "); ok {
						leaderAdmin = a
					}
					if strings.HasPrefix(line, "ha: Ctrl-C") {
						break read
					}
				case <-deadline:
					t.Fatalf("no try line within 90 s; stderr:\n%s", stderr.String())
				}
			}
			require.Len(t, pids, 6, "three etcd members and three servers")
			require.NotEmpty(t, leaderAdmin)

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			run := exec.CommandContext(ctx, mono, "run", "--server", strings.Join(addrs, ","), "--lease", "2s",
				"--no-wait", "jobs/demo", "--", "true")
			b, err := run.CombinedOutput()
			require.NoError(t, err, "the first command after the try line: %s", b)
			b, err = exec.CommandContext(ctx, mono, "locks", "--admin", leaderAdmin).CombinedOutput()
			require.NoError(t, err, "monolock locks: %s", b)
			assert.Contains(t, string(b), "role: active")

			if sig == syscall.SIGTERM {
				// A person trying failover sees it: the leader killed, the
				// line that says so, then the new leader.
				require.NoError(t, syscall.Kill(serverPIDs[leaderAdmin], syscall.SIGKILL))
				var exitedLine, newLeader bool
				deadline := time.After(time.Minute)
				for !exitedLine || !newLeader {
					select {
					case line, ok := <-lines:
						require.True(t, ok, "hacell ended; stderr:\n%s", stderr.String())
						t.Log(line)
						exitedLine = exitedLine || strings.Contains(line, fmt.Sprintf("(pid %d) exited", serverPIDs[leaderAdmin]))
						newLeader = newLeader || (strings.HasPrefix(line, "ha: server ") && strings.Contains(line, "leads the cell now") && !strings.Contains(line, leaderAdmin))
					case <-deadline:
						t.Fatalf("no exit and new leader lines within a minute of killing the leader")
					}
				}
			}
			go func() { // keep draining, so the command never blocks on stdout
				for range lines {
				}
			}()
			require.NoError(t, cmd.Process.Signal(sig))
			select {
			case err := <-exited:
				require.NoError(t, err, "hacell's exit after %v; stderr:\n%s", sig, stderr.String())
			case <-time.After(time.Minute):
				t.Fatalf("hacell did not exit within a minute of %v", sig)
			}
			for _, pid := range pids {
				// Its children were reaped by it; an orphan would still answer.
				err := syscall.Kill(pid, 0)
				assert.True(t, errors.Is(err, syscall.ESRCH), "pid %d still runs after %v (kill 0: %v)", pid, sig, err)
			}
		})
	}
}
