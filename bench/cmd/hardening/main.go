// Command hardening measures what the third hardening round fixed, against
// the real `monolock serve` binary on loopback, and prints one line per
// figure:
//
//   - a reset storm: one client address that acquires a shared lock and
//     resets the connection, again and again, for -storm; how many holders
//     the server holds back and its memory, with --max-sessions-per-addr
//     100 and with the defaults;
//   - acquire/release cycles on an unrelated lock while the default limit's
//     worth of holders is held back and 8 admin readers list, count and
//     scrape without pause, against the same cycles on a quiet server;
//   - /healthz probes while 16 idle connections hog the admin port;
//   - a lock delay across a crash: --lock-delay 30s, a 2 s lease, the
//     holder goes silent, the server is killed 0.4 s after the holder's
//     expiry and restarted; when the next claim is granted.
//
// Run it from bench/: go run ./cmd/hardening (MONOLOCK_BIN picks a
// binary; else ../go is built).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/monolock/monolock/bench/internal/monoserver"
	"github.com/monolock/monolock/bench/internal/procstat"
	"github.com/monolock/monolock/bench/internal/rawclient"
	"github.com/monolock/monolock/go/pkg/protocol"
)

func main() {
	storm := flag.Duration("storm", 20*time.Second, "how long each reset storm lasts")
	cycles := flag.Duration("cycles", 10*time.Second, "how long each run of unrelated-lock cycles lasts")
	skipDelay := flag.Bool("skip-lock-delay", false, "leave out the lock delay across a crash (it takes about 35 s)")
	flag.Parse()
	log.SetFlags(0)
	work, err := os.MkdirTemp("", "monolock-hardening-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(work)
	bin, err := monoserver.Build("../go", work)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	m := &measure{ctx: ctx, bin: bin, work: work}

	quiet := m.start()
	base := m.cycle(quiet.Addr, *cycles, nil)
	readOnly := m.cycle(quiet.Addr, *cycles, func(stop <-chan struct{}) { adminReaders(quiet.AdminAddr, 8, stop) })
	quiet.Stop()
	m.resetStorm("--max-sessions-per-addr 100", *storm, "--max-sessions-per-addr", "100").Stop()
	m.resetStorm("defaults", *storm).Stop()
	// The storm of the default limit fills --max-sessions (held-back
	// holders count), so nobody else could connect: the loaded run lets
	// the storm's address have all but a few hundred places.
	srv := m.resetStorm("--max-sessions-per-addr 19000", *storm, "--max-sessions-per-addr", "19000")
	loaded := m.cycle(srv.Addr, *cycles, func(stop <-chan struct{}) { adminReaders(srv.AdminAddr, 8, stop) })
	fmt.Printf("unrelated lock, quiet server:                %s\n", base)
	fmt.Printf("unrelated lock, nothing held back, 8 readers: %s\n", readOnly)
	fmt.Printf("unrelated lock, %5d held back, 8 readers:    %s\n", heldBack(srv.AdminAddr), loaded)
	srv.Stop()

	m.healthUnderHog()
	if !*skipDelay {
		m.lockDelayAcrossCrash()
	}
}

type measure struct {
	ctx     context.Context
	bin     string
	work    string
	runs    int
	servers []*monoserver.Server // every server started, stopped by fail
}

// fail stops every server this run started and exits: log.Fatal alone
// would leave them running.
func (m *measure) fail(err error) {
	for _, srv := range m.servers {
		srv.Kill()
	}
	log.Fatal(err)
}

// start runs a server with its admin API on a fresh data directory.
func (m *measure) start(args ...string) *monoserver.Server {
	m.runs++
	dir := fmt.Sprintf("%s/data-%d", m.work, m.runs)
	srv, err := monoserver.Start(m.ctx, m.bin, dir, append([]string{"--admin", "127.0.0.1:0"}, args...)...)
	if err != nil {
		m.fail(err)
	}
	m.servers = append(m.servers, srv)
	return srv
}

// resetStorm acquires a shared lock with a 60 s lease and resets the
// connection, for d, from 127.0.0.2 (the unrelated lock's cycles come from
// 127.0.0.1), and returns the server (still running) after printing what
// it holds back and its memory.
func (m *measure) resetStorm(label string, d time.Duration, args ...string) *monoserver.Server {
	srv := m.start(args...)
	before := procstat.Memory(srv.PID())
	frame, _ := protocol.AppendAcquireV2(nil, "storm", 60000, protocol.ModeShared, 0)
	var resets, refused int
	dialer := net.Dialer{Timeout: time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	for end := time.Now().Add(d); time.Now().Before(end); {
		c, err := dialer.Dial("tcp", srv.Addr)
		if err != nil {
			refused++
			continue
		}
		tcp := c.(*net.TCPConn)
		var rc rawclient.Conn
		rc.Reset(tcp)
		_ = tcp.SetDeadline(time.Now().Add(time.Second))
		if _, err := rc.Acquire(frame, 0); err != nil {
			refused++ // closed over the limit
		} else {
			resets++
		}
		_ = tcp.SetLinger(0)
		tcp.Close()
	}
	time.Sleep(200 * time.Millisecond) // the last resets are seen
	fmt.Printf("reset storm, %-30s %6d granted and reset, %6d refused; held back %6d; memory %5.1f MB -> %5.1f MB\n",
		label+":", resets, refused, heldBack(srv.AdminAddr), mb(before), mb(procstat.Memory(srv.PID())))
	return srv
}

func mb(b int64) float64 { return float64(b) / 1e6 }

// heldBack reads the held-back holders from /v1/stats.
func heldBack(admin string) int {
	var st struct {
		HeldBack int `json:"held_back"`
	}
	resp, err := http.Get("http://" + admin + "/v1/stats")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return -1
	}
	return st.HeldBack
}

// cycle is cycle, failing the run on an error.
func (m *measure) cycle(addr string, d time.Duration, load func(stop <-chan struct{})) cycles {
	c, err := cycle(addr, d, load)
	if err != nil {
		m.fail(err)
	}
	return c
}

// cycles is the outcome of acquire/release cycles on one lock.
type cycles struct {
	n        int
	d        time.Duration
	p50, p99 time.Duration
}

func (c cycles) String() string {
	return fmt.Sprintf("%6.0f cycles/s, p50 %6.2f ms, p99 %6.2f ms", float64(c.n)/c.d.Seconds(),
		float64(c.p50.Microseconds())/1000, float64(c.p99.Microseconds())/1000)
}

// cycle runs acquire/release cycles on the lock "unrelated" for d, each a
// connection of its own, while load (if any) runs beside.
func cycle(addr string, d time.Duration, load func(stop <-chan struct{})) (cycles, error) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if load != nil {
		wg.Add(1)
		go func() { defer wg.Done(); load(stop) }()
		time.Sleep(200 * time.Millisecond)
	}
	frame, _ := protocol.AppendAcquire(nil, "unrelated", 10000)
	var lat []time.Duration
	start := time.Now()
	defer func() {
		close(stop)
		wg.Wait()
	}()
	for time.Since(start) < d {
		t0 := time.Now()
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return cycles{}, err
		}
		tcp := c.(*net.TCPConn)
		var rc rawclient.Conn
		rc.Reset(tcp)
		_ = tcp.SetDeadline(time.Now().Add(10 * time.Second))
		_, err = rc.Acquire(frame, 0)
		if err == nil {
			err = rc.Release()
		}
		tcp.Close()
		if err != nil {
			return cycles{}, err
		}
		lat = append(lat, time.Since(t0))
	}
	elapsed := time.Since(start)
	slices.Sort(lat)
	return cycles{n: len(lat), d: elapsed, p50: lat[len(lat)/2], p99: lat[len(lat)*99/100]}, nil
}

// adminReaders runs n readers of the admin API until stop: each asks for
// a listing page, the stats and the metrics, over and over.
func adminReaders(admin string, n int, stop <-chan struct{}) {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 10 * time.Second}
			for {
				for _, path := range []string{"/v1/locks?limit=500", "/v1/stats", "/metrics"} {
					select {
					case <-stop:
						return
					default:
					}
					if resp, err := client.Get("http://" + admin + path); err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				}
			}
		}()
	}
	wg.Wait()
}

// healthUnderHog keeps 16 idle connections open on the admin port,
// reopening each as it is closed, and probes /healthz 20 times, 1 s apart,
// each with a 2 s timeout.
func (m *measure) healthUnderHog() {
	srv := m.start()
	defer srv.Stop()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var opened atomic.Int64
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.DialTimeout("tcp", srv.AdminAddr, time.Second)
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				opened.Add(1)
				_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
				_, _ = c.Read(make([]byte, 1)) // until the server closes it
				c.Close()
			}
		}()
	}
	time.Sleep(time.Second)
	answered := 0
	client := &http.Client{Timeout: 2 * time.Second}
	for range 20 {
		if resp, err := client.Get("http://" + srv.AdminAddr + "/healthz"); err == nil {
			if resp.StatusCode == http.StatusOK {
				answered++
			}
			resp.Body.Close()
		}
		time.Sleep(time.Second)
	}
	close(stop)
	fmt.Printf("/healthz under 16 idle connections:           %d of 20 probes answered (%d hog connections opened)\n",
		answered, opened.Load())
	wg.Wait()
}

// lockDelayAcrossCrash: --lock-delay 30s, a holder on a 2 s lease that
// goes silent, kill -9 of the server 0.4 s after the holder's expiry, a
// restart on the same data directory, and a claim: when it is granted,
// counted from the holder's last message.
func (m *measure) lockDelayAcrossCrash() {
	const lease, delay = 2 * time.Second, 30 * time.Second
	m.runs++
	dir := fmt.Sprintf("%s/data-%d", m.work, m.runs)
	srv, err := monoserver.Start(m.ctx, m.bin, dir, "--lock-delay", delay.String())
	if err != nil {
		m.fail(err)
	}
	m.servers = append(m.servers, srv)
	c, err := net.Dial("tcp", srv.Addr)
	if err != nil {
		m.fail(err)
	}
	defer c.Close()
	frame, _ := protocol.AppendAcquire(nil, "delayed", uint32(lease.Milliseconds()))
	last := time.Now() // the holder's last message: the ACQUIRE
	var rc rawclient.Conn
	rc.Reset(c.(*net.TCPConn))
	if _, err := rc.Acquire(frame, 0); err != nil {
		m.fail(err)
	}
	time.Sleep(time.Until(last.Add(lease + 400*time.Millisecond)))
	srv.Kill()
	next, err := monoserver.Start(m.ctx, m.bin, dir, "--lock-delay", delay.String())
	if err != nil {
		m.fail(err)
	}
	m.servers = append(m.servers, next)
	defer next.Stop()
	w, err := net.Dial("tcp", next.Addr)
	if err != nil {
		m.fail(err)
	}
	defer w.Close()
	var wc rawclient.Conn
	wc.Reset(w.(*net.TCPConn))
	// A lease longer than the wait: the raw waiter sends no heartbeats.
	long, _ := protocol.AppendAcquire(nil, "delayed", 60000)
	if _, err := wc.Acquire(long, rawclient.AnyWaiting); err != nil {
		m.fail(err)
	}
	fmt.Printf("lock delay across a crash (lease 2 s, --lock-delay 30s, kill -9 0.4 s after the expiry): granted %.2f s after the holder's last message (at least 32 s due)\n",
		time.Since(last).Seconds())
}
