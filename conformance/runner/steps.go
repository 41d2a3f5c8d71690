package runner

// The step interpreter: one case per op of spec/scenarios/README.md.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/monolock/monolock/conformance/driver"
	"github.com/monolock/monolock/conformance/proxy"
	"github.com/monolock/monolock/conformance/scenario"
	"github.com/monolock/monolock/conformance/wire"
	"github.com/monolock/monolock/go/testkit/pipe"
)

func (r *run) steps(ctx context.Context) error {
	for i, st := range r.sc.Steps {
		if err := r.step(ctx, st); err != nil {
			label := st.Op
			if st.ID != "" {
				label += " " + st.ID
			}
			if st.Event != "" {
				label += " " + st.Event
			}
			if st.Conn != "" {
				label += " " + st.Conn
			}
			var o *outcome
			if errors.As(err, &o) {
				o.msg = fmt.Sprintf("step %d (%s): %s", i+1, label, o.msg)
				return o
			}
			return fmt.Errorf("step %d (%s): %w", i+1, label, err)
		}
		if err := r.drv.Fault(); err != nil {
			return fmt.Errorf("%w: %v", driver.ErrFault, err)
		}
	}
	return nil
}

func within(ctx context.Context, ms int) (context.Context, context.CancelFunc) {
	d := defaultWithin
	if ms > 0 {
		d = time.Duration(ms) * time.Millisecond
	}
	return context.WithTimeout(ctx, d)
}

func (r *run) step(ctx context.Context, st scenario.Step) error {
	switch st.Op {
	case "acquire":
		lease := uint64(*st.LeaseMS)
		cmd := pipe.Command{Cmd: pipe.Acquire, ID: st.ID, Servers: []string{r.addr},
			Name: st.Name, NameHex: st.NameHex, LeaseMS: &lease, Mode: st.Mode,
			TimeoutMS: st.TimeoutMS, ConnectTimeoutMS: st.ConnectTimeoutMS, Shared: st.Shared, Limit: st.Limit, Value: st.Value,
			Session: st.Session}
		if st.Name != nil {
			cmd.NameHex = nil // one of the two, name first
		}
		if r.srv != nil && r.srv.certs != nil {
			cmd.TLS = r.tlsOf(st.TLS)
		}
		r.leases[st.ID] = float64(*st.LeaseMS)
		return r.send(cmd, st.As)
	case "release", "cancel":
		return r.send(pipe.Command{Cmd: st.Op, ID: st.ID}, st.As)
	case "session":
		lease := uint64(*st.LeaseMS)
		cmd := pipe.Command{Cmd: pipe.Session, ID: st.ID, Servers: []string{r.addr}, LeaseMS: &lease}
		if r.srv != nil && r.srv.certs != nil {
			cmd.TLS = r.tlsOf(st.TLS)
		}
		r.leases[st.ID] = float64(*st.LeaseMS)
		return r.send(cmd, st.As)
	case "observe":
		lease := uint64(*st.LeaseMS)
		cmd := pipe.Command{Cmd: pipe.Observe, ID: st.ID, Servers: []string{r.addr}, Name: st.Name, LeaseMS: &lease}
		if r.srv != nil && r.srv.certs != nil {
			cmd.TLS = r.tlsOf(st.TLS)
		}
		r.leases[st.ID] = float64(*st.LeaseMS)
		return r.send(cmd, st.As)
	case "proclaim":
		return r.send(pipe.Command{Cmd: pipe.Proclaim, ID: st.ID, Value: st.Value}, st.As)
	case "expect":
		return r.expect(ctx, st)
	case "no_event":
		if st.MS > 0 {
			if err := sleep(ctx, time.Duration(st.MS)*time.Millisecond); err != nil {
				return err
			}
		}
		if ev := r.drv.Pending(st.ID); len(ev) > 0 {
			return failf("unexpected event: %s", lines(ev))
		}
		return nil
	case "pause":
		return sleep(ctx, time.Duration(st.MS)*time.Millisecond)
	case "mark":
		r.marks[st.As] = r.now()
		return nil
	case "accept":
		wctx, cancel := within(ctx, st.WithinMS)
		defer cancel()
		if r.fake != nil {
			c, err := r.fake.Accept(wctx)
			if err != nil {
				return failf("the client did not connect")
			}
			r.conns[st.Conn] = &conn{rec: c.Record(), fake: c}
		} else {
			c, err := r.proxy.Accept(wctx)
			if err != nil {
				return failf("the client did not connect")
			}
			r.conns[st.Conn] = &conn{rec: c.Record(), proxied: c}
		}
		r.mark(st.As, r.now())
		return nil
	case "recv":
		want, _ := scenario.DecodeHex(st.Hex)
		wctx, cancel := within(ctx, st.WithinMS)
		defer cancel()
		at, err := r.conns[st.Conn].fake.Recv(wctx, want)
		if err != nil {
			return failf("%v", err)
		}
		r.mark(st.As, at)
		return nil
	case "send":
		b, _ := scenario.DecodeHex(st.Hex)
		if st.DelayMS > 0 {
			if err := sleep(ctx, time.Duration(st.DelayMS)*time.Millisecond); err != nil {
				return err
			}
		}
		r.mark(st.As, r.now())
		// A failed write means the client already closed; the expectations
		// that follow say whether that was right.
		_ = r.conns[st.Conn].fake.Send(ctx, b, st.Chunk, time.Duration(st.GapMS)*time.Millisecond)
		return nil
	case "respond":
		b, _ := scenario.DecodeHex(st.Hex)
		r.conns[st.Conn].fake.Respond(b, time.Duration(st.DelayMS)*time.Millisecond)
		return nil
	case "silence":
		r.conns[st.Conn].fake.Silence()
		r.mark(st.As, r.now())
		return nil
	case "close":
		_ = r.conns[st.Conn].fake.Close()
		r.mark(st.As, r.now())
		return nil
	case "reset":
		if st.Conn != "" && r.conns[st.Conn].fake != nil {
			_ = r.conns[st.Conn].fake.Reset()
		} else {
			r.proxy.Reset()
		}
		r.mark(st.As, r.now())
		return nil
	case "fault":
		// With conn, the fault applies to that connection only.
		var target *proxy.Conn
		if st.Conn != "" {
			target = r.conns[st.Conn].proxied
		}
		f := r.proxy.Faults()
		if target != nil {
			f = target.Faults(r.proxy)
		}
		if st.Fault == "clear" {
			f = proxy.Faults{}
		}
		for _, d := range dirs(st.Dir) {
			switch st.Fault {
			case "fragment":
				f.Fragment[d] = true
			case "delay":
				f.Delay[d] = time.Duration(st.DelayMS) * time.Millisecond
			case "blackhole":
				f.Blackhole[d] = true
			}
		}
		if target != nil {
			target.SetFaults(f)
		} else {
			r.proxy.Set(f)
		}
		r.mark(st.As, r.now())
		return nil
	case "kick":
		wctx, cancel := within(ctx, st.WithinMS)
		defer cancel()
		return r.kick(wctx, *st.Name, st.As)
	case "await_heartbeats":
		return r.awaitHeartbeats(ctx, st)
	case "await_close":
		wctx, cancel := within(ctx, st.WithinMS)
		defer cancel()
		rec := r.conns[st.Conn].rec
		for {
			_, closed, ch := rec.Snapshot()
			if closed >= 0 {
				r.mark(st.As, closed)
				return r.checkWindow(st.At, "the client's close", closed, r.leases[st.ID])
			}
			select {
			case <-ch:
			case <-wctx.Done():
				return failf("the client kept the connection open")
			}
		}
	}
	return fmt.Errorf("op %q not implemented", st.Op)
}

func dirs(s string) []wire.Dir {
	switch s {
	case "up":
		return []wire.Dir{wire.Up}
	case "down":
		return []wire.Dir{wire.Down}
	case "both":
		return []wire.Dir{wire.Up, wire.Down}
	}
	return nil
}

func (r *run) mark(name string, at time.Duration) {
	if name != "" {
		r.marks[name] = at
	}
}

func (r *run) send(cmd pipe.Command, as string) error {
	r.mark(as, r.now())
	if err := r.drv.Send(cmd); err != nil {
		return fmt.Errorf("%w: writing a command: %v", driver.ErrFault, err)
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *run) awaitHeartbeats(ctx context.Context, st scenario.Step) error {
	wctx, cancel := within(ctx, st.WithinMS)
	defer cancel()
	rec := r.conns[st.Conn].rec
	for {
		chunks, closed, ch := rec.Snapshot()
		a := wire.Analyze(chunks)
		if len(a.Heartbeats) >= st.Count {
			r.mark(st.As, a.Heartbeats[st.Count-1].At)
			return nil
		}
		if closed >= 0 {
			return failf("the client closed the connection after %d heartbeats, want %d", len(a.Heartbeats), st.Count)
		}
		select {
		case <-ch:
		case <-wctx.Done():
			return failf("%d heartbeats, want %d", len(a.Heartbeats), st.Count)
		}
	}
}

// resolveMark returns a named time: a mark set by a step's "as", or one of
// last_acked_send:<conn> and last_reply:<conn>, computed from the record.
func (r *run) resolveMark(name string) (time.Duration, error) {
	if at, ok := r.marks[name]; ok {
		return at, nil
	}
	kind, label, ok := strings.Cut(name, ":")
	if c := r.conns[label]; ok && c != nil {
		chunks, _, _ := c.rec.Snapshot()
		a := wire.Analyze(chunks)
		switch kind {
		case "last_acked_send":
			if at, ok := a.LastAckedSend(); ok {
				return at, nil
			}
			return 0, failf("no acknowledged send on %s", label)
		case "last_reply":
			if at, ok := a.LastReply(); ok {
				return at, nil
			}
			return 0, failf("no reply on %s", label)
		}
	}
	return 0, fmt.Errorf("unknown mark %q", name)
}

func (r *run) expect(ctx context.Context, st scenario.Step) error {
	wctx, cancel := within(ctx, st.WithinMS)
	defer cancel()
	// An optional expectation takes the next event only if it is the named
	// one: for races the protocol allows, such as a WAITING that may or may
	// not come before a grant right after a release.
	ev, _, err := r.drv.NextIf(wctx, st.ID, func(e driver.Event) bool {
		return !st.Optional || e.Name == st.Event
	})
	for err == nil && len(st.Skipping) > 0 && !r.matches(st.Event, st.Fields, ev, r.leases[st.ID]) {
		if !r.skippable(st, ev) {
			return failf("got %s, want event %s %s, passing only over %s", ev.Line, st.Event, showFields(st.Fields), showSkipping(st.Skipping))
		}
		ev, _, err = r.drv.NextIf(wctx, st.ID, func(driver.Event) bool { return true })
	}
	if err != nil {
		if errors.Is(err, driver.ErrFault) || ctx.Err() != nil {
			return err
		}
		if st.Optional {
			return nil
		}
		return failf("no event for %s (want %s) within %v", st.ID, st.Event, deadlineOf(st.WithinMS))
	}
	if ev.Name != st.Event {
		if st.Optional {
			return nil
		}
		return failf("got %s, want event %s", ev.Line, st.Event)
	}
	lease := r.leases[st.ID]
	if err := invariants(ev, lease); err != nil {
		return failf("%s: %v", ev.Line, err)
	}
	if ev.Name == pipe.Acquired {
		n, _ := strconv.ParseUint(ev.Token, 10, 64)
		r.tokens[st.ID] = n
	}
	keys := make([]string, 0, len(st.Fields))
	for k := range st.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := r.matchField(k, st.Fields[k], ev.Fields[k], lease); err != nil {
			return failf("%s: field %s: %v", ev.Line, k, err)
		}
	}
	r.mark(st.As, ev.At)
	return r.checkWindow(st.At, ev.Name, ev.At, lease)
}

// checkWindow checks that what happened at `at` lies in the window w (nil:
// no bound), whose lease units are multiplied by lease.
func (r *run) checkWindow(w *scenario.Window, what string, at time.Duration, lease float64) error {
	if w == nil {
		return nil
	}
	from, err := r.resolveMark(w.From)
	if err != nil {
		return err
	}
	got := float64(at-from) / float64(time.Millisecond)
	lo, hi := math.Inf(-1), math.Inf(1)
	if w.MinMS != nil {
		lo = *w.MinMS
	}
	if w.MaxMS != nil {
		hi = *w.MaxMS
	}
	if w.MinLease != nil {
		lo = *w.MinLease * lease
	}
	if w.MaxLease != nil {
		hi = *w.MaxLease * lease
	}
	if got < lo || got > hi {
		return failf("%s came %.1f ms after %s, want %.1f..%.1f ms", what, got, w.From, lo, hi)
	}
	return nil
}

// Kinds an error or lost event may carry (docs/writing-a-client.md).
var kinds = map[string]map[string]bool{
	"error": {"validation": true, "server": true, "busy": true, "timeout": true, "cancelled": true, "connect": true},
	"lost":  {"server": true, "timeout": true, "io": true},
}

// invariants checks what holds for every event of its kind, whatever the
// scenario: a decimal uint64 token, a validity no longer than the client
// timeout, a known kind, and temporary = code < 0x10 (null without a code).
// It reads the raw object, not the typed event: it judges what the driver
// wrote, wrongly typed fields included.
func invariants(ev driver.Event, lease float64) error {
	switch ev.Name {
	case "observed":
		return observedInvariants(ev)
	case "acquired":
		tok, ok := ev.Fields["token"].(string)
		if _, err := strconv.ParseUint(tok, 10, 64); !ok || err != nil {
			return fmt.Errorf("token must be a decimal string")
		}
		num, ok := ev.Fields["valid_ms"].(json.Number)
		v, err := num.Float64()
		if !ok || err != nil {
			return fmt.Errorf("valid_ms must be a number")
		}
		if limit := 0.8*lease + 1; v > limit {
			return fmt.Errorf("valid_ms %.1f exceeds the client timeout 0.8 x lease = %.1f", v, 0.8*lease)
		}
	case "error", "lost":
		kind, _ := ev.Fields["kind"].(string)
		if !kinds[ev.Name][kind] {
			return fmt.Errorf("unknown %s kind %q", ev.Name, kind)
		}
		code, hasCode := ev.Fields["code"].(json.Number)
		temp, isBool := ev.Fields["temporary"].(bool)
		if !hasCode {
			if ev.Fields["code"] != nil || ev.Fields["temporary"] != nil {
				return fmt.Errorf("without a code, code and temporary must be null")
			}
			return nil
		}
		c, err := code.Int64()
		if err != nil || c < 0 || c > 255 {
			return fmt.Errorf("code must be a byte")
		}
		if !isBool || temp != (c < 0x10) {
			return fmt.Errorf("temporary must be %v for code 0x%02x", c < 0x10, c)
		}
	}
	return nil
}

func deadlineOf(ms int) time.Duration {
	if ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return defaultWithin
}

// matcher is an object in "fields": a range or a relation instead of a value.
type matcher struct {
	Min       *float64 `json:"min"`
	Max       *float64 `json:"max"`
	MinLease  *float64 `json:"min_lease"`
	MaxLease  *float64 `json:"max_lease"`
	GTTokenOf string   `json:"gt_token_of"`
	TokenOf   string   `json:"token_of"`
	Present   bool     `json:"present"`
}

func (r *run) matchField(key string, want json.RawMessage, got any, lease float64) error {
	trimmed := strings.TrimSpace(string(want))
	if strings.HasPrefix(trimmed, "{") {
		var m matcher
		dec := json.NewDecoder(strings.NewReader(trimmed))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&m); err != nil {
			return fmt.Errorf("bad matcher %s: %v", trimmed, err)
		}
		if got == nil {
			return fmt.Errorf("missing, want %s", trimmed)
		}
		if m.GTTokenOf != "" {
			prev, ok := r.tokens[m.GTTokenOf]
			s, _ := got.(string)
			n, err := strconv.ParseUint(s, 10, 64)
			if !ok || err != nil || n <= prev {
				return fmt.Errorf("%v is not above the token of %s (%d)", got, m.GTTokenOf, prev)
			}
		}
		if m.TokenOf != "" {
			granted, ok := r.tokens[m.TokenOf]
			if s, _ := got.(string); !ok || s != strconv.FormatUint(granted, 10) {
				return fmt.Errorf("%v is not the token %s was granted (%d)", got, m.TokenOf, granted)
			}
		}
		if m.Min != nil || m.Max != nil || m.MinLease != nil || m.MaxLease != nil {
			num, ok := got.(json.Number)
			f, err := num.Float64()
			if !ok || err != nil {
				return fmt.Errorf("%v is not a number", got)
			}
			lo, hi := math.Inf(-1), math.Inf(1)
			if m.Min != nil {
				lo = *m.Min
			}
			if m.Max != nil {
				hi = *m.Max
			}
			if m.MinLease != nil {
				lo = *m.MinLease * lease
			}
			if m.MaxLease != nil {
				hi = *m.MaxLease * lease
			}
			if f < lo || f > hi {
				return fmt.Errorf("%v outside %.1f..%.1f", f, lo, hi)
			}
		}
		return nil
	}
	var w any
	dec := json.NewDecoder(strings.NewReader(trimmed))
	dec.UseNumber()
	if err := dec.Decode(&w); err != nil {
		return fmt.Errorf("bad value %s", trimmed)
	}
	if !sameJSON(w, got) {
		return fmt.Errorf("got %s, want %s", show(got), trimmed)
	}
	return nil
}

func sameJSON(want, got any) bool {
	switch w := want.(type) {
	case nil:
		return got == nil
	case json.Number:
		g, ok := got.(json.Number)
		if !ok {
			return false
		}
		if g.String() == w.String() {
			return true
		}
		wf, e1 := w.Float64()
		gf, e2 := g.Float64()
		return e1 == nil && e2 == nil && wf == gf
	default:
		return want == got
	}
}

func show(v any) string {
	if v == nil {
		return "null (or missing)"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// observedInvariants: a known state; a leader names its token (a decimal
// string) and value; unknown says nothing else, since it vouches for
// nothing.
func observedInvariants(ev driver.Event) error {
	state, _ := ev.Fields["state"].(string)
	tok, hasToken := ev.Fields["token"].(string)
	switch state {
	case pipe.StateLeader:
		if _, err := strconv.ParseUint(tok, 10, 64); !hasToken || err != nil {
			return fmt.Errorf("a leader's token must be a decimal string")
		}
		if _, ok := ev.Fields["value"].(string); !ok {
			return fmt.Errorf("a leader has a value (a string)")
		}
	case pipe.StateUnknown:
		if hasToken || ev.Fields["value"] != nil {
			return fmt.Errorf("unknown names no leader")
		}
	case pipe.StateNone, pipe.StateHeldBack:
	default:
		return fmt.Errorf("state %q: want leader, none, held_back or unknown", state)
	}
	return nil
}

// matches reports whether ev is event with fields.
func (r *run) matches(event string, fields map[string]json.RawMessage, ev driver.Event, lease float64) bool {
	if ev.Name != event {
		return false
	}
	for k, want := range fields {
		if r.matchField(k, want, ev.Fields[k], lease) != nil {
			return false
		}
	}
	return true
}

// skippable reports whether expect st may pass over ev: an event of its
// name, valid, that matches one of its skipping field sets.
func (r *run) skippable(st scenario.Step, ev driver.Event) bool {
	if invariants(ev, r.leases[st.ID]) != nil {
		return false
	}
	for _, fields := range st.Skipping {
		if r.matches(st.Event, fields, ev, r.leases[st.ID]) {
			return true
		}
	}
	return false
}

func showFields(fields map[string]json.RawMessage) string {
	b, _ := json.Marshal(fields)
	return string(b)
}

func showSkipping(sets []map[string]json.RawMessage) string {
	b, _ := json.Marshal(sets)
	return string(b)
}
