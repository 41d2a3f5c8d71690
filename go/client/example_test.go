package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/monolock/monolock/go/client"
)

func ExampleClient_Acquire() {
	c, err := client.New(client.WithServers("127.0.0.1:7117"), client.WithLease(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lock, err := c.Acquire(ctx, "jobs/nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release()

	// Work under the lock, with a context that ends if the lock is lost,
	// and hand the fencing token to the storage that the lock protects.
	work, stop := lock.Context(context.Background())
	defer stop()
	if err := writeReport(work, lock.Token()); err != nil {
		if errors.Is(lock.Err(), client.ErrLockLost) {
			log.Printf("lost the lock: %v", lock.Err())
		}
		log.Fatal(err)
	}
}

// writeReport stands for the work done under the lock.
func writeReport(ctx context.Context, token uint64) error {
	fmt.Println("writing with fencing token", token)
	return ctx.Err()
}

func ExampleClient_TryAcquire() {
	c, err := client.New()
	if err != nil {
		log.Fatal(err)
	}
	lock, err := c.TryAcquire(context.Background(), "jobs/cleanup")
	switch {
	case errors.Is(err, client.ErrBusy):
		fmt.Println("someone else is cleaning up")
		return
	case err != nil:
		log.Fatal(err)
	}
	defer lock.Release()
	// ... clean up, passing lock.Token() to the storage layer ...
}

// A leader that serves while it leads, fencing its writes with the term's
// token; followers forward to the leader by its value.
func ExampleClient_Campaign() {
	c, err := client.New(client.WithServers("127.0.0.1:7117"), client.WithLease(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	term, err := c.Campaign(context.Background(), "service/leader", []byte("10.0.0.7:8080"))
	if err != nil {
		log.Fatal(err)
	}
	defer term.Resign() // the next candidate leads at once

	// Serve until the term ends: its context is cancelled when the loss is
	// decided, before the server could elect anyone else.
	leading, stop := term.Context(context.Background())
	defer stop()
	if err := writeReport(leading, term.Token()); err != nil {
		log.Printf("stopped leading: %v", term.Err())
	}
}

func ExampleClient_Observe() {
	c, err := client.New(client.WithServers("127.0.0.1:7117"))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changes, err := c.Observe(ctx, "service/leader")
	if err != nil {
		log.Fatal(err)
	}
	for o := range changes {
		switch o.State {
		case client.Leading:
			fmt.Printf("forward requests to %s (term %d)\n", o.Value, o.Token)
		default: // no leader, held back, or unknown: hold requests back
			fmt.Println("no leader to forward to:", o.State)
		}
	}
}

func ExampleClient_Session() {
	c, err := client.New(client.WithServers("127.0.0.1:7117"), client.WithLease(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// One connection, one lease, many locks: they share its fate.
	s, err := c.Session(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close() // releases whatever is still held
	for _, shard := range []string{"shards/1", "shards/2", "shards/3"} {
		lock, err := s.Acquire(ctx, shard)
		if err != nil {
			log.Fatal(err)
		}
		go func() {
			<-lock.Done() // lost (with every lock of the session) or released
			fmt.Println(shard, "ended:", lock.Err())
		}()
	}
	select {
	case <-s.Done():
		log.Print("session over: ", s.Err())
	case <-ctx.Done():
	}
}
