package workload

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/monolock/monolock/bench/internal/monoserver"
)

// The zero configuration is a smoke run; the plan's 100 × 1,000 is in
// bounds, and every bound refuses one step past it.
func TestHeldConfigDefaultsAndBounds(t *testing.T) {
	d := HeldConfig{}.WithDefaults()
	if d.Locks() > 100 || d.Lease != 10*time.Second || d.Window > 2*time.Second || d.Settle <= d.Lease/4 {
		t.Errorf("defaults %+v: not a smoke run that settles a heartbeat period", d)
	}
	if err := d.Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	full := HeldConfig{Sessions: 100, Claims: 1000, Window: 15 * time.Second}.WithDefaults()
	if err := full.Validate(); err != nil || full.Locks() != 100000 {
		t.Errorf("100 × 1000: %v, %d locks", err, full.Locks())
	}
	for _, c := range []struct {
		cfg  HeldConfig
		want string
	}{
		{HeldConfig{Sessions: MaxHeldSessions + 1}, "sessions"},
		{HeldConfig{Sessions: -1}, "sessions"},
		{HeldConfig{Claims: MaxHeldClaims + 1}, "claims per session"},
		{HeldConfig{Sessions: 1000, Claims: 1001}, "in all"},
		{HeldConfig{Lease: time.Millisecond}, "lease"},
		{HeldConfig{Window: MaxHeldWindow + 1}, "window"},
		{HeldConfig{Window: -time.Second}, "window"},
		{HeldConfig{Settle: -time.Second}, "settle"},
	} {
		err := c.cfg.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error about %s", c.cfg, err, c.want)
		}
	}
}

// Memory per lock is the VmRSS growth over the locks held, the cores the
// CPU time over the window's length.
func TestHeldFigures(t *testing.T) {
	r := HeldResult{Held: 1000, RSSBefore: 10 << 20, RSSAfter: 10<<20 + 512000, CPU: 300 * time.Millisecond, Window: 15 * time.Second}
	r.figures()
	if r.BytesPerLock != 512 || r.CPUCores != 0.02 {
		t.Errorf("%v B/lock, %v cores; want 512 and 0.02", r.BytesPerLock, r.CPUCores)
	}
	// Nothing held, or a reading missing: no figure rather than a wrong one.
	for _, r := range []HeldResult{{RSSBefore: 1, RSSAfter: 2}, {Held: 5, RSSAfter: 2}, {Held: 5, RSSBefore: 2}} {
		r.figures()
		if r.BytesPerLock != 0 || r.CPUCores != 0 {
			t.Errorf("%+v: figures from missing readings", r)
		}
	}
}

// A smoke run on a real server, started as the benchmark starts it: every
// lock is granted and none is lost in a window far shorter than the lease,
// and the server's readings are taken.
func TestHeldLocksOnARealServer(t *testing.T) {
	dir := t.TempDir()
	bin, err := monoserver.Build(filepath.Join("..", "..", "..", "go"), dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	srv, err := monoserver.Start(ctx, bin, filepath.Join(dir, "data"), "--max-sessions", "0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	cfg := HeldConfig{Sessions: 3, Claims: 7, Window: 100 * time.Millisecond, Settle: time.Millisecond}
	r, err := Held(ctx, srv.Addr, srv.PID(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Held != 21 || r.Lost != 0 {
		t.Errorf("%d held, %d lost; want 21 and 0", r.Held, r.Lost)
	}
	if r.RSSBefore <= 0 || r.RSSHeld <= 0 || r.RSSAfter <= 0 || r.Window < cfg.Window {
		t.Errorf("readings missing: %+v", r)
	}
	if r.Config.Lease != 10*time.Second {
		t.Errorf("lease %v, want the default 10s", r.Config.Lease)
	}
}
