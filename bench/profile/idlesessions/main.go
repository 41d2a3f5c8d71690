//go:build linux

// Command idlesessions measures what idle sessions cost a real `monolock
// serve`: memory per session and CPU for their heartbeats.
//
//	go run ./profile/idlesessions -bins /tmp/monolock.old,../bin/monolock -n 5000,19000 -rounds 2
//
// (from bench/). For every round, session count and binary, in turn (the
// order of the binaries alternates between rounds, so that load from other
// work on the machine falls on all of them), it starts `bin serve` on
// 127.0.0.1 with the admin API on, opens n sessions (one connection each,
// ACQUIRE of a distinct name with -lease, from several 127.0.x.y source
// addresses, a fresh x per run, as bench's idle workload does), sends each a
// HEARTBEAT every lease/4 and reads its ack, and reports:
//
//   - KiB/session: growth of the server's Pss (and VmRSS) from before the
//     sessions connected to after one heartbeat round, divided by n (the
//     same measure as bench's idle workload);
//   - the Go runtime's view from /metrics (heap in use, stacks in use,
//     goroutines), also as growth per session; -v lists every go_memstats
//     gauge;
//   - cores: the server's utime+stime over -window, divided by the window,
//     and per heartbeat; and how busy the whole machine was meanwhile.
//
// The generator is this process; the server is another one, so each stays
// under the per-process file limit (20,000 here) at 19,000 sessions.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/monolock/monolock/bench/internal/monoserver"
	"github.com/monolock/monolock/bench/internal/procstat"
	"github.com/monolock/monolock/bench/internal/workload"
)

func main() {
	bins := flag.String("bins", "../bin/monolock", "comma-separated server binaries to compare")
	counts := flag.String("n", "5000,19000", "comma-separated session counts")
	rounds := flag.Int("rounds", 1, "rounds over every (n, binary) cell")
	lease := flag.Duration("lease", 10*time.Second, "lease of every session; heartbeats every lease/4")
	window := flag.Duration("window", 30*time.Second, "CPU measuring window")
	settle := flag.Duration("settle", 0, "wait after the sessions are up before measuring memory (default lease/4: one heartbeat round)")
	extra := flag.String("args", "", "extra arguments for `serve`, space-separated")
	flag.BoolVar(&verbose, "v", false, "log the growth per session of every go_memstats gauge")
	flag.Parse()
	if *settle == 0 {
		*settle = *lease / 4
	}
	var ns []int
	for _, s := range strings.Split(*counts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			log.Fatalf("-n: %v", err)
		}
		ns = append(ns, n)
	}
	binList := strings.Split(*bins, ",")
	type key struct {
		bin string
		n   int
	}
	results := map[key][]cell{}
	for r := 0; r < *rounds; r++ {
		for _, n := range ns {
			order := append([]string(nil), binList...)
			if r%2 == 1 {
				for i, j := 0, len(order)-1; i < j; i, j = i+1, j-1 {
					order[i], order[j] = order[j], order[i]
				}
			}
			for _, bin := range order {
				c, err := measure(bin, n, *lease, *settle, *window, strings.Fields(*extra))
				if err != nil {
					log.Printf("round %d %s n=%d: %v", r, bin, n, err)
					continue
				}
				log.Printf("round %d %-28s n=%5d  %s", r, bin, n, c)
				results[key{bin, n}] = append(results[key{bin, n}], c)
			}
		}
	}
	fmt.Println("\nmedians over rounds:")
	for _, n := range ns {
		for _, bin := range binList {
			cs := results[key{bin, n}]
			if len(cs) == 0 {
				continue
			}
			med := func(f func(cell) float64) float64 {
				v := make([]float64, len(cs))
				for i, c := range cs {
					v[i] = f(c)
				}
				sort.Float64s(v)
				return v[len(v)/2]
			}
			fmt.Printf("%-28s n=%5d  Pss %.2f KiB/session  RSS %.2f KiB/session  heap %.2f KiB  stack %.2f KiB  goroutines/session %.2f  cpu %.3f cores (%.1f µs/heartbeat)  [%d runs]\n",
				bin, n, med(func(c cell) float64 { return c.pss }), med(func(c cell) float64 { return c.rss }),
				med(func(c cell) float64 { return c.heap }), med(func(c cell) float64 { return c.stack }),
				med(func(c cell) float64 { return c.goroutines }), med(func(c cell) float64 { return c.cores }),
				med(func(c cell) float64 { return c.usPerBeat }), len(cs))
		}
	}
}

// cell is one measurement; memory figures are KiB per session.
type cell struct {
	n                     int
	pss, rss, heap, stack float64
	pssEnd                float64 // Pss growth per session at the end of the CPU window
	goroutines            float64
	cores, beatsPerSec    float64
	usPerBeat             float64
	machineBusy           float64 // share of all CPUs busy (any process) during the window
	lost                  int64
	setup                 time.Duration
}

func (c cell) String() string {
	return fmt.Sprintf("Pss %.2f KiB/s (end %.2f)  RSS %.2f  heap %.2f  stack %.2f  gor/s %.2f  cpu %.3f cores  %.0f hb/s  %.1f µs/hb  lost %d  setup %v  machine %.0f%% busy",
		c.pss, c.pssEnd, c.rss, c.heap, c.stack, c.goroutines, c.cores, c.beatsPerSec, c.usPerBeat, c.lost, c.setup.Round(time.Millisecond), 100*c.machineBusy)
}

var verbose bool

func measure(bin string, n int, lease, settle, window time.Duration, extra []string) (cell, error) {
	c := cell{n: n}
	dir, err := os.MkdirTemp("", "idlesessions-")
	if err != nil {
		return c, err
	}
	defer os.RemoveAll(dir)
	srv, err := monoserver.Start(context.Background(), bin, filepath.Join(dir, "data"),
		append([]string{"--admin", "127.0.0.1:0", "--max-sessions", "0"}, extra...)...)
	if err != nil {
		return c, err
	}
	defer srv.Stop()
	pid := srv.PID()
	time.Sleep(time.Second)
	pss0, rss0 := procstat.Memory(pid), vmRSS(pid)
	m0, err := scrape(srv.AdminAddr)
	if err != nil {
		return c, err
	}
	t0 := time.Now()
	g, err := workload.OpenIdleSessions(context.Background(), srv.Addr, n, lease)
	if err != nil {
		return c, err
	}
	defer g.Close()
	c.setup = time.Since(t0)
	time.Sleep(settle)
	pss1, rss1 := procstat.Memory(pid), vmRSS(pid)
	m1, err := scrape(srv.AdminAddr)
	if err != nil {
		return c, err
	}
	per := func(d float64) float64 { return d / float64(n) / 1024 }
	c.pss, c.rss = per(float64(pss1-pss0)), per(float64(rss1-rss0))
	c.heap = per(m1["go_memstats_heap_inuse_bytes"] - m0["go_memstats_heap_inuse_bytes"])
	c.stack = per(m1["go_memstats_stack_inuse_bytes"] - m0["go_memstats_stack_inuse_bytes"])
	c.goroutines = (m1["go_goroutines"] - m0["go_goroutines"]) / float64(n)
	if verbose {
		var names []string
		for k := range m1 {
			if strings.HasPrefix(k, "go_memstats_") && strings.HasSuffix(k, "_bytes") {
				names = append(names, k)
			}
		}
		sort.Strings(names)
		for _, k := range names {
			log.Printf("  %-45s %+9.3f KiB/session  (%.0f -> %.0f)", k, per(m1[k]-m0[k]), m0[k], m1[k])
		}
	}
	beats0, lost0 := g.Beats(), g.Lost()
	busy0, total0 := machineCPU()
	cpu0, w0 := procstat.CPU(pid), time.Now()
	time.Sleep(window)
	cpu1, w1 := procstat.CPU(pid), time.Now()
	busy1, total1 := machineCPU()
	if total1 > total0 {
		c.machineBusy = float64(busy1-busy0) / float64(total1-total0)
	}
	c.cores = (cpu1 - cpu0).Seconds() / w1.Sub(w0).Seconds()
	beats := g.Beats() - beats0
	c.beatsPerSec = float64(beats) / w1.Sub(w0).Seconds()
	if beats > 0 {
		c.usPerBeat = float64((cpu1 - cpu0).Microseconds()) / float64(beats)
	}
	c.lost = g.Lost() - lost0
	c.pssEnd = per(float64(procstat.Memory(pid) - pss0))
	return c, nil
}

// scrape reads the untyped, label-free samples of the admin /metrics.
func scrape(admin string) (map[string]float64, error) {
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || strings.HasPrefix(f[0], "#") || strings.Contains(f[0], "{") {
			continue
		}
		if v, err := strconv.ParseFloat(f[1], 64); err == nil {
			out[f[0]] = v
		}
	}
	return out, sc.Err()
}

// machineCPU returns the busy and total jiffies of all CPUs (/proc/stat).
func machineCPU() (busy, total int64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])
	for i, v := range f[1:] {
		x, _ := strconv.ParseInt(v, 10, 64)
		total += x
		if i != 3 && i != 4 { // idle, iowait
			busy += x
		}
	}
	return busy, total
}

func vmRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			kb, _ := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			return kb * 1024
		}
	}
	return 0
}
