package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/monolock/monolock/conformance/driver"
	"github.com/monolock/monolock/conformance/proxy"
	"github.com/monolock/monolock/conformance/runner"
	"github.com/monolock/monolock/go/testkit/pipe"
)

// worker is one client's driver process, contending for one lock in a
// loop through the client's public API, behind fault proxies of its own
// (one per server). Each claim is exclusive or shared by the lock's mix.
type worker struct {
	name    string
	proc    *driver.Process
	proxies []*proxy.Proxy
	events  chan driver.Event
	ledger  *ledger
	lease   time.Duration
	lock    Lock
	rng     *rand.Rand
	start   time.Time
	// sessions: the worker puts its claims on a session (protocol version
	// 4) of its driver, reopened after each loss or failure, instead of a
	// connection per claim. session is the open one's id, "" when none is.
	sessions bool
	session  string
	opened   int // sessions opened so far, for the next id

	mu           sync.Mutex
	held         *Window       // the open window, if any
	stopped      bool          // SIGSTOPped now
	resumed      chan struct{} // closed at SIGCONT
	grants       int
	sharedGrants int
	failures     map[string]int // acquire errors by kind
	observed     []Observation  // an election's watcher: what it said, in order
	pauses       []span         // when its process was stopped
}

// span is a stretch of the run's time.
type span struct{ From, To time.Duration }

func startWorker(ctx context.Context, root string, c runner.Client, name string, lock Lock, servers []string, start time.Time, sessions bool) (*worker, error) {
	w := &worker{name: name, lock: lock, events: make(chan driver.Event, 256), failures: map[string]int{}, start: start}
	for _, s := range servers {
		p, err := proxy.Listen(s, start)
		if err != nil {
			w.close()
			return nil, err
		}
		w.proxies = append(w.proxies, p)
	}
	env := c.ExtraEnv()
	proc, ready, err := driver.StartStream(ctx, root+"/"+c.Dir, c.Run, env, start, func(ev driver.Event) {
		if ev.Name == pipe.Observed {
			w.record(ev) // the watcher's, apart from the claims' events
			return
		}
		w.events <- ev
	})
	if err != nil {
		w.close()
		return nil, fmt.Errorf("%s: driver did not start: %w", name, err)
	}
	w.proc = proc
	if lock.Exclusive < 1 && !slices.Contains(ready.Capabilities, "shared") {
		w.close()
		return nil, fmt.Errorf("%s: the driver lacks the shared capability that %s needs", name, lock.Name)
	}
	if lock.Election && !slices.Contains(ready.Capabilities, "election") {
		w.close()
		return nil, fmt.Errorf("%s: the driver lacks the election capability that %s needs", name, lock.Name)
	}
	w.sessions = sessions && slices.Contains(ready.Capabilities, "sessions")
	return w, nil
}

// openSession opens a session for the worker's next claims, if it uses
// them and has none open. A session that cannot open now is tried again
// at the next claim.
func (w *worker) openSession(ctx context.Context) error {
	if !w.sessions || w.session != "" {
		return nil
	}
	w.opened++
	id := "s" + strconv.Itoa(w.opened)
	lease := uint64(w.lease.Milliseconds())
	if err := w.proc.Send(pipe.Command{Cmd: pipe.Session, ID: id, Servers: w.addrs(), LeaseMS: &lease}); err != nil {
		return fmt.Errorf("%s: %w", w.name, err)
	}
	ev, err := w.next(ctx, id, pipe.Opened, pipe.Error)
	if err != nil {
		return err
	}
	if ev.Name == pipe.Error {
		w.mu.Lock()
		w.failures["session "+ev.Kind]++
		w.mu.Unlock()
		return w.sleep(ctx, w.lease/4)
	}
	w.session = id
	return nil
}

// closeSession closes the worker's session: after a loss or a failure it
// may be dead, and the next claim opens a fresh one.
func (w *worker) closeSession(ctx context.Context) error {
	if w.session == "" {
		return nil
	}
	id := w.session
	w.session = ""
	return w.release(ctx, id)
}

// watchID is the id of an election worker's observe.
const watchID = "watch"

// record keeps one observed event of the worker's watch.
func (w *worker) record(ev driver.Event) {
	tok, _ := strconv.ParseUint(ev.Token, 10, 64)
	w.mu.Lock()
	w.observed = append(w.observed, Observation{Watcher: w.name, At: ev.At, State: ev.State, Token: tok})
	w.mu.Unlock()
}

func (w *worker) addrs() []string {
	var a []string
	for _, p := range w.proxies {
		a = append(a, p.Addr())
	}
	return a
}

func (w *worker) now() time.Duration { return time.Since(w.start) }

// run contends until ctx ends, then lets go of what it holds.
func (w *worker) run(ctx context.Context) error {
	if w.lock.Election {
		lease := uint64(w.lease.Milliseconds())
		watch := pipe.Command{Cmd: pipe.Observe, ID: watchID, Servers: w.addrs(), Name: &w.lock.Name, LeaseMS: &lease}
		if err := w.proc.Send(watch); err != nil {
			return fmt.Errorf("%s: %w", w.name, err)
		}
	}
	for n := 0; ctx.Err() == nil; n++ {
		if err := w.openSession(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if w.sessions && w.session == "" {
			continue // it could not open: try again
		}
		id := "c" + strconv.Itoa(n)
		lease, timeout := uint64(w.lease.Milliseconds()), (20 * w.lease).Milliseconds()
		cmd := pipe.Command{Cmd: pipe.Acquire, ID: id, Servers: w.addrs(), Name: &w.lock.Name,
			LeaseMS: &lease, Mode: pipe.ModeWait, TimeoutMS: &timeout}
		// A plain lock draws nothing, so its seed deals the hold times it
		// always has.
		if w.lock.Election {
			cmd.Value = &w.name // how followers would reach this candidate
		}
		if w.lock.Exclusive < 1 && w.rng.Float64() >= w.lock.Exclusive {
			cmd.Shared = true
			if w.lock.Limit > 0 {
				cmd.Limit = &w.lock.Limit
			}
		}
		cmd.Session = w.session
		if err := w.proc.Send(cmd); err != nil {
			return fmt.Errorf("%s: %w", w.name, err)
		}
		ev, err := w.next(ctx, id, pipe.Acquired, pipe.Error)
		if err != nil {
			if ctx.Err() != nil {
				return nil // the run is over; quit releases what comes late
			}
			return err
		}
		if ev.Name == pipe.Error {
			w.mu.Lock()
			w.failures[ev.Kind]++
			w.mu.Unlock()
			if err := w.closeSession(ctx); err != nil {
				return err
			}
			if err := w.sleep(ctx, w.lease/4); err != nil {
				return err
			}
			continue
		}
		lost, err := w.hold(ctx, id, cmd.Shared, ev)
		if err != nil {
			return err
		}
		if lost {
			if err := w.closeSession(ctx); err != nil {
				return err
			}
		}
	}
	return w.closeSession(ctx)
}

// hold uses the lock: a write at once, then one every lease/5 until the
// lost signal or the end of a random hold, then release. It reports
// whether the lock was lost.
func (w *worker) hold(ctx context.Context, id string, shared bool, acquired driver.Event) (lost bool, err error) {
	token, err := strconv.ParseUint(acquired.Token, 10, 64)
	if err != nil {
		return false, fmt.Errorf("%s: token %q: %w", w.name, acquired.Token, err)
	}
	w.awaitResume(ctx) // a process stopped since it printed the grant writes when it runs again
	win := w.ledger.grant(w.name, w.lock.Name, shared, token, acquired.At)
	w.mu.Lock()
	w.held, w.grants = win, w.grants+1
	if shared {
		w.sharedGrants++
	}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.held = nil
		w.mu.Unlock()
	}()
	holdFor := time.Duration(float64(w.lease) * (0.2 + 1.8*w.rng.Float64()))
	until := time.NewTimer(holdFor)
	defer until.Stop()
	tick := time.NewTicker(w.lease / 5)
	defer tick.Stop()
	for {
		select {
		case ev := <-w.events:
			if ev.ID != id {
				continue
			}
			if ev.Name == pipe.Lost {
				w.ledger.end(win, ev.At, true)
				return true, w.release(ctx, id)
			}
			if ev.Name == pipe.DriverError {
				return false, fmt.Errorf("%s: %s", w.name, ev.Line)
			}
		case <-tick.C:
			// A stopped process writes when it runs again, before it has
			// read what arrived meanwhile: the write fencing exists for.
			w.awaitResume(ctx)
			w.ledger.write(win)
		case <-until.C:
			w.awaitResume(ctx) // a stopped application decides nothing
			w.ledger.end(win, w.now(), false)
			return false, w.release(ctx, id)
		case <-ctx.Done():
			w.ledger.end(win, w.now(), false)
			return false, w.release(ctx, id)
		}
	}
}

// release lets go of id and waits for the driver's answer, within a bound
// that the end of the run does not shorten: a release that began just
// before the end (while the server restarts, say) must still be answered.
func (w *worker) release(ctx context.Context, id string) error {
	if err := w.proc.Send(pipe.Command{Cmd: pipe.Release, ID: id}); err != nil {
		return fmt.Errorf("%s: %w", w.name, err)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second+w.lease)
	defer cancel()
	_, err := w.next(ctx, id, pipe.Released)
	return err
}

// next waits for one of the named events of id; others of id are skipped
// (waiting, and a lost event after the worker decided to release).
func (w *worker) next(ctx context.Context, id string, names ...string) (driver.Event, error) {
	for {
		select {
		case ev := <-w.events:
			if ev.Name == pipe.DriverError {
				return ev, fmt.Errorf("%s: %s", w.name, ev.Line)
			}
			if ev.ID != id {
				continue
			}
			for _, n := range names {
				if ev.Name == n {
					return ev, nil
				}
			}
		case <-w.proc.Exited():
			return driver.Event{}, fmt.Errorf("%s: driver exited: %v\n%s", w.name, w.proc.Fault(), w.proc.Stderr())
		case <-ctx.Done():
			return driver.Event{}, fmt.Errorf("%s: no %v for %s: %w", w.name, names, id, ctx.Err())
		}
	}
}

func (w *worker) sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return nil
	}
}

// pause stops the worker's process for d; its open window, if any, is
// marked as paused.
func (w *worker) pause(d time.Duration) error {
	w.mu.Lock()
	w.stopped, w.resumed = true, make(chan struct{})
	if w.held != nil {
		w.ledger.paused(w.held)
	}
	resumed := w.resumed
	w.mu.Unlock()
	if err := w.proc.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	from := w.now()
	time.Sleep(d)
	err := w.proc.Signal(syscall.SIGCONT)
	w.mu.Lock()
	w.stopped = false
	w.pauses = append(w.pauses, span{from, w.now()})
	w.mu.Unlock()
	close(resumed)
	return err
}

// awaitResume blocks while the worker's process is stopped: the
// application is stopped with it.
func (w *worker) awaitResume(ctx context.Context) {
	w.mu.Lock()
	stopped, resumed := w.stopped, w.resumed
	w.mu.Unlock()
	if !stopped {
		return
	}
	select {
	case <-resumed:
	case <-ctx.Done():
	}
}

// holding returns the open window, if any.
func (w *worker) holding() *Window {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.held
}

// setFaults applies f to every proxy of the worker (all its connections).
func (w *worker) setFaults(f proxy.Faults) {
	for _, p := range w.proxies {
		p.Set(f)
		for _, c := range p.Conns() {
			c.SetFaults(f)
		}
	}
}

// reset aborts every connection of the worker with a TCP reset.
func (w *worker) reset() {
	for _, p := range w.proxies {
		p.Reset()
	}
}

func (w *worker) close() {
	if w.proc != nil {
		_ = w.proc.Quit(5 * time.Second)
	}
	for _, p := range w.proxies {
		p.Close()
	}
}
