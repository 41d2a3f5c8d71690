package runner

import (
	"encoding/hex"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/monolock/monolock/conformance/scenario"
	"github.com/monolock/monolock/conformance/wire"
)

// records returns the records a check names: one conn, or all for "*".
func (r *run) records(label string) []*wire.Record {
	if label != "*" && label != "" {
		return []*wire.Record{r.conns[label].rec}
	}
	var out []*wire.Record
	if r.fake != nil {
		for _, c := range r.fake.Conns() {
			out = append(out, c.Record())
		}
	}
	if r.proxy != nil {
		for _, c := range r.proxy.Conns() {
			out = append(out, c.Record())
		}
	}
	return out
}

func (r *run) check(ck scenario.Check) error {
	switch ck.Check {
	case "connections":
		n := len(r.records("*"))
		if ck.Count != nil && n != *ck.Count {
			return fmt.Errorf("the client opened %d connections, want %d", n, *ck.Count)
		}
	case "client_bytes":
		var got []byte
		for _, rec := range r.records(ck.Conn) {
			chunks, _, _ := rec.Snapshot()
			for _, c := range chunks {
				if c.Dir == wire.Up {
					got = append(got, c.Data...)
				}
			}
		}
		want, _ := scenario.DecodeHex(deref(ck.Hex))
		if string(got) != string(want) {
			return fmt.Errorf("the client sent %s, want %s", hexOrNone(got), hexOrNone(want))
		}
	case "max_in_flight":
		for _, rec := range r.records(ck.Conn) {
			chunks, _, _ := rec.Snapshot()
			a := wire.Analyze(chunks)
			if a.Problem != "" {
				return fmt.Errorf("%s", a.Problem)
			}
			if a.MaxInFlight > ck.Max {
				return fmt.Errorf("%d requests in flight at once, at most %d allowed; %s",
					a.MaxInFlight, ck.Max, timeline(a))
			}
		}
	case "heartbeat_interval":
		return r.checkInterval(ck)
	case "tokens_increasing":
		var prev uint64
		for i, id := range ck.IDs {
			tok, ok := r.tokens[id]
			if !ok {
				return fmt.Errorf("no token for %s", id)
			}
			if i > 0 && tok <= prev {
				return fmt.Errorf("token of %s (%d) is not above %d", id, tok, prev)
			}
			prev = tok
		}
	}
	return nil
}

// ExpectedInterval is the send-to-send heartbeat interval of a correct
// client with the given lease under a steady RTT: the clamp formula of the
// protocol, and never shorter than the RTT since the next heartbeat waits for
// the previous ack.
func ExpectedInterval(leaseMS, rttMS float64) float64 {
	base := leaseMS / 4
	interval := math.Min(math.Max(base-2*rttMS, 1), base)
	return math.Max(interval, rttMS)
}

// checkInterval compares the median send-to-send heartbeat interval with
// the clamp formula. The median keeps one late timer on a loaded machine
// from failing the run; the tolerance is a fraction of the lease.
func (r *run) checkInterval(ck scenario.Check) error {
	chunks, _, _ := r.conns[ck.Conn].rec.Snapshot()
	a := wire.Analyze(chunks)
	var gaps []float64
	for i := 1 + ck.Skip; i < len(a.Heartbeats); i++ {
		gaps = append(gaps, ms(a.Heartbeats[i].At-a.Heartbeats[i-1].At))
	}
	if len(gaps) < ck.MinCount {
		return fmt.Errorf("%d heartbeat intervals measured, want at least %d", len(gaps), ck.MinCount)
	}
	sorted := append([]float64(nil), gaps...)
	sort.Float64s(sorted)
	median := sorted[len(sorted)/2]
	want := ExpectedInterval(ck.LeaseMS, ck.RTTMS)
	tol := ck.TolLease * ck.LeaseMS
	if math.Abs(median-want) > tol {
		return fmt.Errorf("median heartbeat interval %.1f ms, want %.1f ± %.1f ms (lease %.0f ms, rtt %.0f ms); intervals %s",
			median, want, tol, ck.LeaseMS, ck.RTTMS, fmtMS(gaps))
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func fmtMS(v []float64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf("%.0f", x)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// timeline renders the exchanges of a connection for a failure report.
func timeline(a wire.Analysis) string {
	var parts []string
	for _, e := range a.Exchanges {
		s := fmt.Sprintf("%s@%.0f", wire.TypeName(e.Send.Type), ms(e.Send.At))
		if e.Reply != nil {
			s += fmt.Sprintf("->%s@%.0f", wire.TypeName(e.Reply.Type), ms(e.Reply.At))
		} else {
			s += "->(no reply)"
		}
		parts = append(parts, s)
	}
	for _, p := range a.Promotions {
		parts = append(parts, fmt.Sprintf("promotion@%.0f", ms(p.At)))
	}
	return strings.Join(parts, " ")
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func hexOrNone(b []byte) string {
	if len(b) == 0 {
		return "nothing"
	}
	return hex.EncodeToString(b)
}
