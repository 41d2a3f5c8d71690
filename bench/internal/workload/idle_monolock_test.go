package workload

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/monolock/monolock/bench/internal/monoserver"
)

// The idle generator holds every session it opens on a real server and
// keeps each alive with heartbeats; the server it runs on is started the
// way the benchmark starts it, admin API included.
func TestIdleSessionsHoldAndHeartbeat(t *testing.T) {
	dir := t.TempDir()
	bin, err := monoserver.Build(filepath.Join("..", "..", "..", "go"), dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	srv, err := monoserver.Start(ctx, bin, filepath.Join(dir, "data"), "--admin", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	resp, err := http.Get("http://" + srv.AdminAddr + "/readyz")
	if err != nil {
		t.Fatalf("admin API at %q: %v", srv.AdminAddr, err)
	}
	resp.Body.Close()

	const n = 200
	// Heartbeats every 750 ms: a session is lost only if one comes 3 s
	// late, which no loaded machine makes of a loopback exchange.
	lease := 3 * time.Second
	s, err := OpenIdleSessions(ctx, srv.Addr, n, lease)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// A lease: every session must have been answered at least once more,
	// and none dropped (a late heartbeat would end its lease).
	time.Sleep(lease)
	if lost := s.Lost(); lost != 0 {
		t.Fatalf("%d sessions lost", lost)
	}
	if beats := s.Beats(); beats < n {
		t.Fatalf("%d heartbeats acknowledged in a lease, want at least %d", beats, n)
	}
}
