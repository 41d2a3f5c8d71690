// Package report turns one benchmark run's results into docs/benchmarks.md
// and its PNG charts.
package report

import (
	"time"

	"github.com/monolock/monolock/bench/internal/election"
	"github.com/monolock/monolock/bench/internal/overlap"
	"github.com/monolock/monolock/bench/internal/safety"
	"github.com/monolock/monolock/bench/internal/stats"
	"github.com/monolock/monolock/bench/internal/workload"
)

// Results is everything one run measured, as written to results.json.
type Results struct {
	Started   time.Time         `json:"started"`
	Duration  time.Duration     `json:"duration_ns"`
	Command   string            `json:"command"`
	Quick     bool              `json:"quick"`
	Cores     int               `json:"cores"`
	CPUModel  string            `json:"cpu_model"`
	GoVersion string            `json:"go_version"`
	Kernel    string            `json:"kernel"`
	LoadStart string            `json:"load_start"` // /proc/loadavg when the run began
	LoadEnd   string            `json:"load_end"`
	Versions  map[string]string `json:"versions"`

	Throughput []ThroughputCell `json:"throughput"`
	Handoff    []HandoffCell    `json:"handoff"`
	Idle       []IdleCell       `json:"idle"`
	Dead       []DeadCell       `json:"dead"`
	Clients    []ClientCell     `json:"clients"`
	// ClientWarmup is how long each driver ran unmeasured before workload 5.
	ClientWarmup time.Duration `json:"client_warmup_ns,omitempty"`
	Safety       []SafetyCell  `json:"safety,omitempty"`
	// SafetyRun describes how the safety cells were measured; with
	// Separate set they come from a run of their own, merged into an
	// earlier run's results.
	SafetyRun *SafetyInfo `json:"safety_run,omitempty"`
	// Failover is workload 7: an HA cell's failover beside etcd's own.
	Failover *FailoverSection `json:"failover,omitempty"`
	// Overlap is workload 8: a held command's work against the next
	// holder's, under the faults of workload 6; OverlapRun is how it was
	// measured.
	Overlap    []OverlapCell `json:"overlap,omitempty"`
	OverlapRun *OverlapInfo  `json:"overlap_run,omitempty"`
	// Shared is workload 9: shared locks, the readers/writer handoff and
	// a semaphore.
	Shared *SharedSection `json:"shared,omitempty"`
	// Election is workload 10: leader election beside etcd's.
	Election *ElectionSection `json:"election,omitempty"`
	// Held is 100k held locks: sessions holding many claims each on one
	// server, its memory per lock and its heartbeat CPU.
	Held  *HeldSection `json:"held,omitempty"`
	Notes []string     `json:"notes"`
}

// ElectionSection is workload 10: each system's runs of the four
// scenarios of package election.
type ElectionSection struct {
	Lease     time.Duration     `json:"lease_ns"` // monolock's lease, etcd's session TTL
	Runs      int               `json:"runs"`     // per system, of the resign, crash and split scenarios
	Parallel  int               `json:"parallel"` // crash and split runs of one system at once
	Followers int               `json:"followers"`
	Proclaims int               `json:"proclaims"` // per system
	Pace      time.Duration     `json:"pace_ns"`   // between two Proclaim calls' starts
	Systems   []election.System `json:"systems"`
	// Libraries are the peers' client libraries, module path → version.
	Libraries map[string]string `json:"libraries,omitempty"`
	Err       string            `json:"err,omitempty"` // why nothing was measured
	SeparateRun
}

// HeldSection is the held-locks workload's one cell.
type HeldSection struct {
	Result workload.HeldResult `json:"result"`
	Err    string              `json:"err,omitempty"`
	SeparateRun
}

// SharedSection is workload 9. Each part is empty when it was not run.
type SharedSection struct {
	Throughput []ModeCell `json:"throughput,omitempty"` // shared acquire → release on one name
	RW         []RWCell   `json:"rw_handoff,omitempty"`
	Semaphore  []ModeCell `json:"semaphore,omitempty"`
	// Hold is how long each semaphore holder holds before it releases.
	Hold time.Duration `json:"hold_ns,omitempty"`
	SeparateRun
}

// SeparateRun is the run that measured a section (safety, overlap,
// shared): with Separate set, a run of its own, merged into an earlier
// run's results, which the section's text then describes.
type SeparateRun struct {
	Separate  bool          `json:"separate"`
	Started   time.Time     `json:"started"`
	Duration  time.Duration `json:"duration_ns"`
	Command   string        `json:"command"`
	LoadStart string        `json:"load_start"`
	LoadEnd   string        `json:"load_end"`
}

// ModeCell is one system's cycles in one mode (shared, or a semaphore).
type ModeCell struct {
	System  string               `json:"system"`
	Workers int                  `json:"workers"`
	Result  workload.CycleResult `json:"result"`
	Err     string               `json:"err,omitempty"`
}

// RWCell is one system's readers/writer handoff with one reader count.
type RWCell struct {
	System string            `json:"system"`
	Result workload.RWResult `json:"result"`
	Err    string            `json:"err,omitempty"`
}

// OverlapCell is workload 8 for one lock tool, held command and fault.
type OverlapCell struct {
	Tool     string          `json:"tool"`     // "monolock run", "etcdctl lock"
	Monolock bool            `json:"monolock"` // held to monolock run's target
	Variant  overlap.Variant `json:"variant"`
	Fault    safety.Fault    `json:"fault"`
	Runs     []overlap.Run   `json:"runs"`
	Summary  overlap.Summary `json:"summary"`
	Err      string          `json:"err,omitempty"` // why the tool was not measured at all
}

// OverlapInfo is how the overlap cells were measured.
type OverlapInfo struct {
	Lease  time.Duration `json:"lease_ns"` // monolock run's lease, etcdctl lock's TTL
	Runs   int           `json:"runs"`     // per cell
	Delay  time.Duration `json:"delay_ns"` // the delay fault's
	Job    time.Duration `json:"job_ns"`   // A's job, unless stopped
	Window time.Duration `json:"window_ns"`
	Every  time.Duration `json:"every_ns"` // time between appends
	Gap    float64       `json:"gap"`      // monolock run's target: A's last append ≥ Gap × lease before B's first
	// Binary is the monolock binary measured; Etcdctl etcdctl's version.
	Binary  string `json:"binary"`
	Etcdctl string `json:"etcdctl,omitempty"`
	SeparateRun
}

// FailoverSection is workload 7. Every figure is in seconds, one per run.
type FailoverSection struct {
	TTL      time.Duration `json:"ttl_ns"`
	Lease    time.Duration `json:"lease_ns"`
	Monolock []float64     `json:"monolock_s"` // kill -9 of the active server -> the waiter's grant
	// LongLease is the lease of another lock held during the BesideLong
	// runs, whose figures are Monolock's with that lock held too.
	LongLease  time.Duration `json:"long_lease_ns,omitempty"`
	BesideLong []float64     `json:"beside_long_s,omitempty"`
	Raft       []float64     `json:"etcd_raft_s"`   // kill -9 of etcd's raft leader -> a new leader
	Recipe     []float64     `json:"etcd_recipe_s"` // an election recipe's leader vanishes -> the next one elected
	Separate   bool          `json:"separate,omitempty"`
	Err        string        `json:"err,omitempty"`
}

// ThroughputCell is workload 1 for one system and worker count.
type ThroughputCell struct {
	System  string        `json:"system"`
	Workers int           `json:"workers"`
	Stats   stats.Summary `json:"stats"`
	// CPU time per cycle, in µs: the server's (summed over its processes)
	// and this load generator's.
	ServerCPUPerOp float64 `json:"server_cpu_us_per_op"`
	ClientCPUPerOp float64 `json:"client_cpu_us_per_op"`
	Err            string  `json:"err,omitempty"`
}

// HandoffCell is workload 2 for one system.
type HandoffCell struct {
	System  string                 `json:"system"`
	Workers int                    `json:"workers"`
	Result  workload.HandoffResult `json:"result"`
	Err     string                 `json:"err,omitempty"`
}

// IdleCell is workload 3 for one system and holder count.
type IdleCell struct {
	System string              `json:"system"`
	Result workload.IdleResult `json:"result"`
	Err    string              `json:"err,omitempty"`
}

// DeadCell is workload 4 for one system.
type DeadCell struct {
	System string              `json:"system"`
	Result workload.DeadResult `json:"result"`
}

// ClientCell is workload 5 for one client and one workload.
type ClientCell struct {
	Client   string        `json:"client"`
	Workload string        `json:"workload"` // "uncontended" or "handoff"
	Workers  int           `json:"workers"`
	Stats    stats.Summary `json:"stats"`
	Err      string        `json:"err,omitempty"`
}

// SafetyCell is workload 6 for one recipe and one fault on the holder's link.
type SafetyCell struct {
	System   string         `json:"system"`   // row label: "monolock node", "etcd", ...
	Monolock bool           `json:"monolock"` // held to the monolock target
	Signal   string         `json:"signal"`   // what the holder watches
	Fault    safety.Fault   `json:"fault"`
	Runs     []safety.Run   `json:"runs"`
	Summary  safety.Summary `json:"summary"`
	Err      string         `json:"err,omitempty"` // why the recipe was not measured at all
}

// SafetyInfo is how the safety cells were measured.
type SafetyInfo struct {
	Lease  time.Duration `json:"lease_ns"`
	Runs   int           `json:"runs"`     // per cell
	Delay  time.Duration `json:"delay_ns"` // the delay-down fault's extra delay
	Window time.Duration `json:"window_ns"`
	Target float64       `json:"target"` // monolock's margin target, × lease
	// Libraries are the peers' client libraries, module path → version.
	Libraries map[string]string `json:"libraries,omitempty"`
	SeparateRun
}
