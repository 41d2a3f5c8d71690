package workload

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/monolock/monolock/bench/internal/systems"
)

// DeadResult is the dead-holder workload's outcome for one system.
type DeadResult struct {
	Lease    time.Duration   `json:"lease_ns"`
	Trials   int             `json:"trials"`
	Samples  []time.Duration `json:"samples_ns"` // freeze -> grant, granted trials only
	Bound    time.Duration   `json:"bound_ns"`   // how long a waiter waited at most
	Missed   int             `json:"missed"`     // trials not granted within Bound
	FirstErr string          `json:"first_err,omitempty"`
}

// HoldCommand returns the command line that runs a holder process: it
// acquires name on system with lease, prints "held", and holds until killed.
type HoldCommand func(system, name string, lease time.Duration) *exec.Cmd

// DeadHolder freezes a lock holder with SIGSTOP while a waiter is queued,
// and measures the time from the freeze until the waiter is granted.
// The freeze falls at a random point of the holder's refresh cycle.
func DeadHolder(ctx context.Context, sys systems.System, hold HoldCommand, lease time.Duration, trials int) DeadResult {
	r := DeadResult{Lease: lease, Trials: trials, Bound: 3*lease + 2*time.Second}
	w, err := sys.Worker(ctx)
	if err != nil {
		r.FirstErr = err.Error()
		r.Missed = trials
		return r
	}
	defer w.Close()
	for t := range trials {
		d, err := deadTrial(ctx, sys.Name(), w, hold, fmt.Sprintf("dead/%d/%d", t, time.Now().UnixNano()), lease, r.Bound)
		if err != nil {
			r.Missed++
			if r.FirstErr == "" {
				r.FirstErr = err.Error()
			}
			continue
		}
		r.Samples = append(r.Samples, d)
	}
	return r
}

func deadTrial(ctx context.Context, system string, w systems.Worker, hold HoldCommand, name string, lease, bound time.Duration) (time.Duration, error) {
	cmd := hold(system, name, lease)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	defer func() {
		_ = cmd.Process.Kill() // works on a stopped process too
		_ = cmd.Wait()
	}()
	held := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && strings.TrimSpace(line) != "held" {
			err = fmt.Errorf("holder said %q", line)
		}
		held <- err
	}()
	select {
	case err := <-held:
		if err != nil {
			return 0, fmt.Errorf("holder: %w", err)
		}
	case <-time.After(30 * time.Second):
		return 0, fmt.Errorf("holder did not acquire within 30 s")
	}

	wctx, cancel := context.WithTimeout(ctx, bound+time.Second)
	defer cancel()
	type grant struct {
		at  time.Time
		h   systems.Held
		err error
	}
	granted := make(chan grant, 1)
	go func() {
		h, err := w.Acquire(wctx, name)
		granted <- grant{time.Now(), h, err}
	}()
	// Let the waiter queue, then freeze at a random point of the holder's
	// refresh cycle (lease/4).
	time.Sleep(300*time.Millisecond + rand.N(lease/4))
	select {
	case g := <-granted:
		if g.err == nil {
			_ = g.h.Release()
			return 0, fmt.Errorf("waiter granted while the holder was alive")
		}
		return 0, fmt.Errorf("waiter: %w", g.err)
	default:
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return 0, err
	}
	frozen := time.Now()
	select {
	case g := <-granted:
		if g.err != nil {
			return 0, fmt.Errorf("not granted within %v of the freeze: %w", bound, g.err)
		}
		_ = g.h.Release()
		return g.at.Sub(frozen), nil
	case <-time.After(bound):
		go func() { // a grant racing the cancellation is released, not leaked
			if g := <-granted; g.err == nil {
				_ = g.h.Release()
			}
		}()
		return 0, fmt.Errorf("not granted within %v of the freeze", bound)
	}
}
