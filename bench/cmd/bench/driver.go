package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/monolock/monolock/go/client"
)

// driverMain is a minimal pipe-protocol driver (docs/writing-a-client.md)
// for the Go client, so that the Go client is measured through the same
// JSON pipe as the other languages' conformance drivers in workload 5. It
// knows acquire (mode wait), release and quit: what the workload sends.
func driverMain() int {
	var (
		wmu     sync.Mutex
		out     = bufio.NewWriter(os.Stdout)
		mu      sync.Mutex
		locks   = map[string]*client.Lock{}
		clients = map[string]*client.Client{}
	)
	emit := func(ev map[string]any) {
		b, _ := json.Marshal(ev)
		wmu.Lock()
		out.Write(append(b, '\n'))
		out.Flush()
		wmu.Unlock()
	}
	emit(map[string]any{"event": "ready", "client": "go-bench", "capabilities": []string{}})
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var cmd struct {
			Cmd       string   `json:"cmd"`
			ID        string   `json:"id"`
			Servers   []string `json:"servers"`
			Name      string   `json:"name"`
			LeaseMS   int64    `json:"lease_ms"`
			TimeoutMS int64    `json:"timeout_ms"`
		}
		if err := json.Unmarshal(in.Bytes(), &cmd); err != nil {
			emit(map[string]any{"event": "driver_error", "message": err.Error()})
			continue
		}
		switch cmd.Cmd {
		case "acquire":
			key := strings.Join(cmd.Servers, ",") + "/" + strconv.FormatInt(cmd.LeaseMS, 10)
			mu.Lock()
			c := clients[key]
			if c == nil {
				var err error
				c, err = client.New(client.WithServers(cmd.Servers...), client.WithLease(time.Duration(cmd.LeaseMS)*time.Millisecond))
				if err != nil {
					mu.Unlock()
					emit(map[string]any{"event": "error", "id": cmd.ID, "kind": "validation", "message": err.Error()})
					continue
				}
				clients[key] = c
			}
			mu.Unlock()
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(cmd.TimeoutMS)*time.Millisecond)
				defer cancel()
				l, err := c.Acquire(ctx, cmd.Name)
				if err != nil {
					emit(map[string]any{"event": "error", "id": cmd.ID, "kind": "server", "message": err.Error()})
					return
				}
				mu.Lock()
				locks[cmd.ID] = l
				mu.Unlock()
				emit(map[string]any{"event": "acquired", "id": cmd.ID, "token": fmt.Sprint(l.Token())})
			}()
		case "release":
			mu.Lock()
			l := locks[cmd.ID]
			delete(locks, cmd.ID)
			mu.Unlock()
			if l != nil {
				_ = l.Release()
			}
			emit(map[string]any{"event": "released", "id": cmd.ID})
		case "quit":
			return 0
		default:
			emit(map[string]any{"event": "driver_error", "message": "unknown command " + cmd.Cmd})
		}
	}
	return 0
}
