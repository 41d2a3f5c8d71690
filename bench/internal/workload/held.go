package workload

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/monolock/monolock/bench/internal/procstat"
	"github.com/monolock/monolock/go/client"
)

// HeldConfig is the held-locks workload: Sessions sessions (protocol
// version 4) of the Go client, each holding Claims locks of distinct names
// with a Lease, then a quiet Window of heartbeats only. A zero field takes
// its default, which is small: the defaults are a smoke run, and the
// benchmark's plan asks for 100 × 1,000.
type HeldConfig struct {
	Sessions int           `json:"sessions"`
	Claims   int           `json:"claims"` // per session
	Lease    time.Duration `json:"lease_ns"`
	Window   time.Duration `json:"window_ns"`
	// Settle is the pause between the last grant and the first reading
	// of the window, in which every session heartbeats at least once.
	Settle time.Duration `json:"settle_ns"`
}

// Bounds of HeldConfig: claims per session up to the server's default
// --max-streams, at most a million locks in all, a lease the protocol
// takes and a window that ends.
const (
	MaxHeldSessions = 10000
	MaxHeldClaims   = 10000
	MaxHeldLocks    = 1000000
	MaxHeldWindow   = 10 * time.Minute
)

// WithDefaults fills the zero fields of c: 2 sessions × 10 claims, a 10 s
// lease, a 1 s window and a settle of lease/4 (one heartbeat period of the
// Go client) plus a second.
func (c HeldConfig) WithDefaults() HeldConfig {
	if c.Sessions == 0 {
		c.Sessions = 2
	}
	if c.Claims == 0 {
		c.Claims = 10
	}
	if c.Lease == 0 {
		c.Lease = 10 * time.Second
	}
	if c.Window == 0 {
		c.Window = time.Second
	}
	if c.Settle == 0 {
		c.Settle = c.Lease/4 + time.Second
	}
	return c
}

// Validate refuses a configuration outside the bounds.
func (c HeldConfig) Validate() error {
	switch {
	case c.Sessions < 1 || c.Sessions > MaxHeldSessions:
		return fmt.Errorf("held: %d sessions, want 1 to %d", c.Sessions, MaxHeldSessions)
	case c.Claims < 1 || c.Claims > MaxHeldClaims:
		return fmt.Errorf("held: %d claims per session, want 1 to %d (the server's default --max-streams)", c.Claims, MaxHeldClaims)
	case c.Sessions*c.Claims > MaxHeldLocks:
		return fmt.Errorf("held: %d × %d locks, want at most %d in all", c.Sessions, c.Claims, MaxHeldLocks)
	case c.Lease < time.Second || c.Lease > time.Hour:
		return fmt.Errorf("held: lease %v, want 1s to 1h", c.Lease)
	case c.Window <= 0 || c.Window > MaxHeldWindow:
		return fmt.Errorf("held: window %v, want more than 0 and at most %v", c.Window, MaxHeldWindow)
	case c.Settle < 0:
		return fmt.Errorf("held: settle %v is negative", c.Settle)
	}
	return nil
}

// Locks is how many locks c holds in all.
func (c HeldConfig) Locks() int { return c.Sessions * c.Claims }

// HeldResult is what the held-locks workload measured on the server.
type HeldResult struct {
	Config HeldConfig `json:"config"`
	Held   int        `json:"held"` // locks granted
	// Lost counts the locks that ended before the end of the window (a
	// session's end ends its locks): a heartbeat that came too late, or
	// the server's doing.
	Lost  int           `json:"lost"`
	Setup time.Duration `json:"setup_ns"` // from the first session to the last grant
	// VmRSS of the server before the first session, after the settle
	// (the window's start) and at the window's end.
	RSSBefore int64 `json:"rss_before"`
	RSSHeld   int64 `json:"rss_held"`
	RSSAfter  int64 `json:"rss_after"`
	// BytesPerLock is (RSSAfter − RSSBefore) ÷ Held: the sessions'
	// connections are in it, spread over their locks.
	BytesPerLock float64       `json:"bytes_per_lock"`
	CPU          time.Duration `json:"cpu_ns"` // the server's utime+stime over the window
	Window       time.Duration `json:"measured_window_ns"`
	CPUCores     float64       `json:"cpu_cores"` // CPU ÷ Window
}

// figures fills in r's per-lock memory and its cores from the readings.
func (r *HeldResult) figures() {
	r.BytesPerLock, r.CPUCores = 0, 0
	if r.Held > 0 && r.RSSBefore > 0 && r.RSSAfter > 0 {
		r.BytesPerLock = float64(r.RSSAfter-r.RSSBefore) / float64(r.Held)
	}
	if r.Window > 0 {
		r.CPUCores = r.CPU.Seconds() / r.Window.Seconds()
	}
}

// Held opens cfg's sessions on the `monolock serve` at addr (process pid,
// started with --max-sessions 0 so that a lock is not refused for the
// server's open files), takes every claim, lets them settle and measures
// the server's VmRSS growth per lock and its CPU over the quiet window.
// Extra client options (TLS) are passed to the Go client.
func Held(ctx context.Context, addr string, pid int, cfg HeldConfig, opts ...client.Option) (HeldResult, error) {
	cfg = cfg.WithDefaults()
	r := HeldResult{Config: cfg}
	if err := cfg.Validate(); err != nil {
		return r, err
	}
	c, err := client.New(append([]client.Option{client.WithServers(addr), client.WithLease(cfg.Lease)}, opts...)...)
	if err != nil {
		return r, err
	}
	r.RSSBefore = procstat.RSS(pid)
	t0 := time.Now()
	sessions, locks, err := holdAll(ctx, c, cfg)
	defer func() {
		for _, s := range sessions {
			s.Close()
		}
	}()
	r.Setup = time.Since(t0)
	r.Held = len(locks)
	if err != nil {
		return r, err
	}
	if !SleepCtx(ctx, cfg.Settle) {
		return r, ctx.Err()
	}
	r.RSSHeld = procstat.RSS(pid)
	cpu0, w0 := procstat.OwnCPU(pid), time.Now()
	if !SleepCtx(ctx, cfg.Window) {
		return r, ctx.Err()
	}
	cpu1, w1 := procstat.OwnCPU(pid), time.Now()
	r.RSSAfter = procstat.RSS(pid)
	r.CPU, r.Window = cpu1-cpu0, w1.Sub(w0)
	r.Lost = lost(locks)
	r.figures()
	return r, nil
}

// holdAll opens the sessions at once and takes each one's claims in turn;
// it returns what it opened, to be closed, even with an error.
func holdAll(ctx context.Context, c *client.Client, cfg HeldConfig) ([]*client.Session, []*client.Lock, error) {
	var (
		mu       sync.Mutex
		sessions []*client.Session
		locks    []*client.Lock
		errs     []error
		wg       sync.WaitGroup
	)
	for i := range cfg.Sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := c.Session(ctx)
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("session %d: %w", i, err))
				mu.Unlock()
				return
			}
			mu.Lock()
			sessions = append(sessions, s)
			mu.Unlock()
			mine := make([]*client.Lock, 0, cfg.Claims)
			for j := range cfg.Claims {
				l, err := s.Acquire(ctx, fmt.Sprintf("held-%d-%d", i, j))
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("session %d, claim %d: %w", i, j, err))
					mu.Unlock()
					break
				}
				mine = append(mine, l)
			}
			mu.Lock()
			locks = append(locks, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return sessions, locks, fmt.Errorf("%d of %d sessions failed, first: %w", len(errs), cfg.Sessions, errs[0])
	}
	return sessions, locks, nil
}

// lost counts the locks that have ended.
func lost(locks []*client.Lock) int {
	n := 0
	for _, l := range locks {
		select {
		case <-l.Done():
			n++
		default:
		}
	}
	return n
}
