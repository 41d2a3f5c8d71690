// Package report turns one benchmark run's results into docs/benchmarks.md
// and its PNG charts.
package report

import (
	"time"

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
	Notes      []string         `json:"notes"`
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
