package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/admin"
	"github.com/monolock/monolock/go/internal/listing"
	"github.com/monolock/monolock/go/internal/server"
)

func TestCellLine(t *testing.T) {
	for _, tc := range []struct {
		cell cellView
		want string
	}{
		{cellView{Mode: cellHA, Role: "leader", Leader: "10.0.0.1:7117", GraceRemainingMS: 1400},
			"role: active  leader: 10.0.0.1:7117  grace: 1.4 s left, new claims wait"},
		{cellView{Mode: cellHA, Role: "leader", Leader: "10.0.0.1:7117", GraceRemainingMS: 1301},
			"role: active  leader: 10.0.0.1:7117  grace: 1.4 s left, new claims wait"}, // rounded up
		{cellView{Mode: cellHA, Role: "leader", Leader: "10.0.0.1:7117", GraceRemainingMS: 1},
			"role: active  leader: 10.0.0.1:7117  grace: 0.1 s left, new claims wait"}, // never "0.0 s left"
		{cellView{Mode: cellHA, Role: "leader", Leader: "10.0.0.1:7117", GraceRemainingMS: 30000},
			"role: active  leader: 10.0.0.1:7117  grace: 30.0 s left, new claims wait"},
		{cellView{Mode: cellHA, Role: "leader", Leader: "10.0.0.1:7117"},
			"role: active  leader: 10.0.0.1:7117  grace: none left, granting"},
		{cellView{Mode: cellHA, Role: "follower", Leader: "10.0.0.1:7117"},
			"role: passive  leader: 10.0.0.1:7117  (the active server lists the locks)"},
		{cellView{Mode: cellHA, Role: "follower"},
			"role: passive  leader: none known  (the active server lists the locks)"},
		{cellView{Mode: cellHA, Role: "observer", Leader: "10.0.0.1:7117"},
			"role: observer  leader: 10.0.0.1:7117"},
		{cellView{Mode: cellStandalone}, ""},
		{cellView{Mode: cellUnknown, Error: "admin API: 500 Internal Server Error"}, ""},
	} {
		assert.Equal(t, tc.want, cellLine(tc.cell), "%+v", tc.cell)
	}
}

// The cell line and a blank line go above the table; a standalone server's
// output is the table alone, as before HA.
func TestWriteLocksPutsCellLineAboveTable(t *testing.T) {
	now := time.Date(2026, 11, 30, 5, 15, 31, 0, time.UTC)
	locks := []admin.Lock{{Name: "deploy/web", Holder: &admin.Session{ID: 7, Remote: "10.1.2.3:51522",
		Identity: "cn:deployer", Token: 1042, LeaseMS: 10000, Since: now.Add(-192 * time.Second)}}}

	var ha strings.Builder
	writeLocks(&ha, locksOutput{Locks: locks, Cell: cellView{Mode: cellHA, Role: "leader",
		Leader: "10.0.0.1:7117", GraceRemainingMS: 1400}}, now)
	lines := strings.Split(ha.String(), "\n")
	require.Len(t, lines, 5, ha.String())
	assert.Equal(t, "role: active  leader: 10.0.0.1:7117  grace: 1.4 s left, new claims wait", lines[0])
	assert.Empty(t, lines[1])
	assert.Regexp(t, `^LOCK\s+STATE\s+SESSION`, lines[2])
	assert.Regexp(t, `^deploy/web\s+held\s+7\s+1042\s+cn:deployer\s+10\.1\.2\.3:51522\s+10s\s+3m12s$`, lines[3])

	var alone, table strings.Builder
	writeLocks(&alone, locksOutput{Locks: locks, Cell: cellView{Mode: cellStandalone}}, now)
	writeLockTable(&table, locks, now)
	assert.Equal(t, table.String(), alone.String())

	var unknown strings.Builder
	writeLocks(&unknown, locksOutput{Locks: nil, Cell: cellView{Mode: cellUnknown, Error: "x"}}, now)
	assert.Equal(t, "no locks\n", unknown.String())
}

// A VALUE column appears when a claim has a value, shown safe for a
// terminal (hex when it is not UTF-8); a table without values is as before.
func TestLockTableShowsValues(t *testing.T) {
	now := time.Date(2026, 11, 30, 5, 15, 31, 0, time.UTC)
	holder := admin.Session{ID: 7, Token: 9, LeaseMS: 10000, Since: now, Value: "10.0.0.7:8080"}
	waiter := admin.Session{ID: 8, LeaseMS: 10000, Since: now, ValueHex: "00ff"}
	plain := admin.Session{ID: 9, LeaseMS: 10000, Since: now, Value: "\x1b[2Jx"}
	var b strings.Builder
	writeLockTable(&b, []admin.Lock{{Name: "leader", Holder: &holder, Holders: []admin.Session{holder},
		Waiters: []admin.Session{waiter, plain}}}, now)
	lines := strings.Split(b.String(), "\n")
	assert.Regexp(t, `^LOCK\s+STATE.*\sFOR\s+VALUE$`, lines[0])
	assert.Regexp(t, `^leader\s+held\s+7\s.*\s10\.0\.0\.7:8080$`, lines[1])
	assert.Regexp(t, `\s0x00ff$`, lines[2])
	assert.NotContains(t, b.String(), "\x1b", "no escape sequence reaches the terminal")
}

// A lock with more sessions than its listing names says how many more.
func TestLockTableSaysHowManyMore(t *testing.T) {
	now := time.Date(2026, 11, 30, 5, 15, 31, 0, time.UTC)
	one := admin.Session{ID: 7, LeaseMS: 10000, Since: now, Mode: admin.ModeShared}
	lk := admin.Lock{Name: "pool", Mode: admin.ModeShared, Holders: []admin.Session{one}, HoldersTotal: 17500,
		HeldBack: 3, HeldBackHolders: []admin.Session{one}, Waiters: []admin.Session{one}, WaitersTotal: 4}
	var b strings.Builder
	writeLockTable(&b, []admin.Lock{lk}, now)
	assert.Regexp(t, `(?m)^\s+… and 17499 more holders\s`, b.String())
	assert.Regexp(t, `(?m)^\s+… and 2 more held back\s`, b.String())
	assert.Regexp(t, `(?m)^\s+… and 3 more waiting\s`, b.String())
}

// The --json shape: "locks" as GET /v1/locks has it, and "cell" with every
// field in every mode.
func TestLocksJSONShape(t *testing.T) {
	for _, cell := range []cellView{
		{Mode: cellHA, Role: "follower", Leader: "10.0.0.1:7117"},
		{Mode: cellStandalone},
		{Mode: cellUnknown, Error: "boom"},
	} {
		b, err := json.Marshal(locksOutput{Locks: []admin.Lock{}, Cell: cell})
		require.NoError(t, err)
		var top map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(b, &top))
		assert.ElementsMatch(t, []string{"locks", "cell"}, keys(top))
		assert.JSONEq(t, `[]`, string(top["locks"]))
		var c map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(top["cell"], &c))
		assert.ElementsMatch(t, []string{"mode", "role", "leader", "grace_remaining_ms", "error"}, keys(c), string(b))
	}
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// fakeServer is what the admin API reads, with or without an HA cell.
type fakeServer struct {
	cell  *server.CellStatus // nil: standalone
	locks []admin.Lock       // sorted by name; nil: one lock, jobs/a
}

func (fakeServer) HeldBackUntil(uint64) (time.Time, bool) { return time.Time{}, false }
func (fakeServer) KickHeldBack(uint64) bool               { return false }
func (fakeServer) SessionPage(string, string, uint64, int) (listing.SessionPage, bool) {
	return listing.SessionPage{}, false
}

func (f fakeServer) LockPage(after string, limit int) ([]admin.Lock, bool) {
	locks := f.locks
	if locks == nil {
		locks = []admin.Lock{heldBy("jobs/a", admin.Session{ID: 1, Token: 5, LeaseMS: 1000})}
	}
	i, _ := slices.BinarySearchFunc(locks, after, func(l admin.Lock, name string) int {
		return strings.Compare(l.Name, name)
	})
	if i < len(locks) && locks[i].Name == after {
		i++
	}
	end := min(i+limit, len(locks))
	return locks[i:end], end < len(locks)
}

// heldBy is the listing of lock name with one exclusive holder.
func heldBy(name string, holder admin.Session) admin.Lock {
	if holder.Mode == "" {
		holder.Mode = admin.ModeExclusive
	}
	l := admin.Lock{Name: name, Mode: admin.ModeExclusive, Holders: []admin.Session{holder}, HoldersTotal: 1}
	l.Holder = &l.Holders[0]
	return l
}

func (f fakeServer) Kick(uint64) bool { return false }
func (f fakeServer) Ready() bool      { return true }
func (f fakeServer) Cell() (server.CellStatus, bool) {
	if f.cell == nil {
		return server.CellStatus{}, false
	}
	return *f.cell, true
}

// oldAdminAPI answers as an admin API from before /v1/cell: the locks, and
// 404 "no such endpoint" for anything else under /v1/.
func oldAdminAPI(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/locks", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"locks": [{"name": "jobs/a", "holder": {"session": 1, "remote": "", "identity": "", "token": 5, "lease_ms": 1000, "since": "2026-11-30T05:12:19Z"}, "waiters": []}]}`))
	})
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error": "no such endpoint"}`))
	})
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return hs
}

// fetchLocks lists the locks whatever /v1/cell answers, and says what it
// answered.
func TestFetchLocksCellStates(t *testing.T) {
	serve := func(h http.Handler) string {
		hs := httptest.NewServer(h)
		t.Cleanup(hs.Close)
		return hs.URL
	}
	grace := 1400 * time.Millisecond
	broken := http.NewServeMux()
	broken.Handle("/", admin.Handler(admin.Config{Server: fakeServer{}}))
	broken.HandleFunc("GET /v1/cell", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "boom", http.StatusInternalServerError)
	})
	for _, tc := range []struct {
		name, url string
		want      cellView
		errHas    string
	}{
		{"ha", serve(admin.Handler(admin.Config{Server: fakeServer{cell: &server.CellStatus{Role: "leader", Leader: "10.0.0.1:7117", Grace: grace}}})),
			cellView{Mode: cellHA, Role: "leader", Leader: "10.0.0.1:7117", GraceRemainingMS: 1400}, ""},
		{"standalone", serve(admin.Handler(admin.Config{Server: fakeServer{}})), cellView{Mode: cellStandalone}, ""},
		{"older server", oldAdminAPI(t).URL, cellView{Mode: cellUnknown}, "no /v1/cell"},
		{"cell error", serve(broken), cellView{Mode: cellUnknown}, "500 Internal Server Error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := admin.NewClient(tc.url, "", nil, wait)
			out, err := fetchLocks(context.Background(), c)
			require.NoError(t, err)
			require.Len(t, out.Locks, 1)
			assert.Equal(t, "jobs/a", out.Locks[0].Name)
			if tc.errHas != "" {
				assert.Contains(t, out.Cell.Error, tc.errHas)
				out.Cell.Error = ""
			}
			assert.Equal(t, tc.want, out.Cell)
		})
	}
}

// The binary against an admin API older than /v1/cell: the table and exit
// status 0, with a note on stderr of why there is no cell line.
func TestLocksCommandOnOlderServer(t *testing.T) {
	hs := oldAdminAPI(t)
	code, stdout, stderr := command(t, nil, "locks", "--admin", hs.URL)
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `^LOCK\s+STATE`, stdout)
	assert.Contains(t, stdout, "jobs/a")
	assert.Equal(t, "monolock locks: HA cell state unknown: "+admin.ErrNoCellAPI.Error()+"\n", stderr)

	code, stdout, stderr = command(t, nil, "locks", "--admin", hs.URL, "--json")
	require.Equal(t, 0, code, stderr)
	var out struct {
		Locks []admin.Lock `json:"locks"`
		Cell  cellView     `json:"cell"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &out), stdout)
	require.Len(t, out.Locks, 1)
	assert.Equal(t, cellView{Mode: cellUnknown, Error: admin.ErrNoCellAPI.Error()}, out.Cell)
}

// More locks than one page: monolock locks follows "next" to the end,
// lists each lock once and in order, and says how many pages it took;
// --json keeps its shape, with every lock.
func TestLocksCommandPagesThroughTheListing(t *testing.T) {
	const n = 2*admin.DefaultPageLimit + 17
	locks := make([]admin.Lock, n)
	for i := range locks {
		locks[i] = heldBy(fmt.Sprintf("jobs/%04d", i),
			admin.Session{ID: uint64(i + 1), Token: uint64(i + 1), LeaseMS: 1000, Since: time.Now()})
	}
	hs := httptest.NewServer(admin.Handler(admin.Config{Server: fakeServer{locks: locks}}))
	t.Cleanup(hs.Close)

	code, stdout, stderr := command(t, nil, "locks", "--admin", hs.URL)
	require.Equal(t, 0, code, stderr)
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	require.Len(t, lines, 1+n+1, "header, one row per lock, the count")
	assert.Regexp(t, `^LOCK\s+STATE`, lines[0])
	for i := range n {
		require.Regexp(t, fmt.Sprintf(`^jobs/%04d\s+held\s+%d\s`, i, i+1), lines[1+i])
	}
	assert.Equal(t, fmt.Sprintf("%d locks in 3 pages", n), lines[len(lines)-1])

	code, stdout, stderr = command(t, nil, "locks", "--admin", hs.URL, "--json")
	require.Equal(t, 0, code, stderr)
	var out struct {
		Locks []admin.Lock `json:"locks"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &out))
	require.Len(t, out.Locks, n)
	assert.Equal(t, "jobs/0000", out.Locks[0].Name)
	assert.Equal(t, fmt.Sprintf("jobs/%04d", n-1), out.Locks[n-1].Name)
}
