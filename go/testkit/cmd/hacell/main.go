// Command hacell runs a local HA cell to try failover by hand: a
// three-member etcd and three `monolock serve` with their admin APIs, on
// loopback (go/testkit/cell), until SIGINT, SIGTERM or SIGHUP, which stop
// every process it started. `go run mage.go ha` builds and runs it
// (docs/ha.md). It prints the processes' pids, and its "try" line only
// once a server leads the cell past its grace, so that the first command
// typed after it finds an active server.
//
//	hacell -bin bin/monolock
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/monolock/monolock/go/testkit/cell"
)

// out carries what a person reads (addresses, pids, the try line);
// errors go to stderr through log.
var out = log.New(os.Stdout, "ha: ", 0)

// readyWait bounds the wait for a leader: etcd's election, one campaign
// and one grace take seconds.
const readyWait = time.Minute

func main() {
	var (
		bin      = flag.String("bin", "bin/monolock", "the monolock `binary`")
		listen   = flag.String("listen", "127.0.0.1:7217,127.0.0.1:7227,127.0.0.1:7237", "the servers' lock protocol `addresses`, comma-separated, one per server")
		admin    = flag.String("admin", "127.0.0.1:7218,127.0.0.1:7228,127.0.0.1:7238", "the servers' admin API `addresses`, one per server")
		etcdPort = flag.Int("etcd-base-port", 12479, "etcd member i listens for clients on `port`+2i and for peers on port+2i+1; 0: free ports")
		ttl      = flag.Duration("etcd-ttl", 2*time.Second, "the servers' --etcd-ttl")
	)
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("ha: ")
	if err := run(*bin, strings.Split(*listen, ","), strings.Split(*admin, ","), *etcdPort, *ttl); err != nil {
		log.Fatal(err)
	}
}

func run(bin string, addrs, admins []string, etcdPort int, ttl time.Duration) error {
	// Caught before anything starts, so that no signal ends this process
	// and leaves the cell behind.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%v: run go run mage.go build", err)
	}
	dir, err := os.MkdirTemp("", "monolock-ha-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	c, err := cell.Start(ctx, cell.Options{Bin: bin, Dir: dir, Servers: len(addrs), Etcd: 3, EtcdBasePort: etcdPort,
		EtcdTTL: ttl, Prefix: "/monolock/local/", Addrs: addrs, AdminAddrs: admins})
	if err != nil {
		return err
	}
	defer func() {
		out.Print("stopping the cell")
		if err := c.Close(); err != nil {
			log.Print(err)
		}
	}()
	e := c.Etcd()
	var members []string
	for i := range e.Len() {
		members = append(members, fmt.Sprintf("%s (pid %d)", e.Endpoint(i), e.PID(i)))
	}
	out.Printf("etcd members on %s", strings.Join(members, ", "))
	for i, a := range c.Addrs() {
		out.Printf("server %s (pid %d, admin %s, log %s)", a, c.PID(i), c.AdminAddrs()[i], c.LogPath(i))
	}
	leader, err := c.Ready(ctx, readyWait)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped before it was ready
		}
		return err
	}
	servers := strings.Join(c.Addrs(), ",")
	out.Printf("server %s leads the cell", c.Addrs()[leader])
	out.Printf("try: %s run --server %s jobs/demo -- sleep 30", bin, servers)
	out.Printf("and: %s locks --admin %s", bin, c.AdminAddrs()[leader])
	out.Printf("Ctrl-C (or SIGTERM) stops the cell; data and logs in %s", filepath.Clean(dir))
	watch(ctx, c, leader)
	return nil
}

// watchEvery is how often the cell is looked at for what a person trying
// failover wants to see: a server that ended, and where leadership went.
const watchEvery = 250 * time.Millisecond

// watch prints each server that ends and each change of leader until ctx
// ends, so that a kill -9 of a server shows its effect in this terminal.
func watch(ctx context.Context, c *cell.Cell, leader int) {
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	gone := make([]bool, len(c.Addrs()))
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for i, a := range c.Addrs() {
			if !gone[i] && c.Exited(i) {
				gone[i] = true
				out.Printf("server %s (pid %d) exited; see %s", a, c.PID(i), c.LogPath(i))
			}
		}
		now := c.Leader(ctx)
		if now == leader || ctx.Err() != nil {
			continue
		}
		leader = now
		if leader < 0 {
			out.Print("no server leads the cell now")
		} else {
			out.Printf("server %s leads the cell now (admin %s)", c.Addrs()[leader], c.AdminAddrs()[leader])
		}
	}
}
