package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const ms = time.Millisecond

func TestLedgerFindsOverlapsAndExplainsPausedOnes(t *testing.T) {
	var l ledger
	a := l.grant("a", 1, 0)
	l.end(a, 100*ms, false)
	b := l.grant("b", 2, 150*ms) // a gap of 50 ms, no overlap
	l.end(b, 400*ms, true)
	c := l.grant("c", 3, 350*ms) // overlaps b by 50 ms: nobody was paused
	l.end(c, 500*ms, false)
	d := l.grant("d", 4, 600*ms)
	l.end(d, 700*ms, true)
	e := l.grant("e", 5, 650*ms) // overlaps d, whose holder was paused
	l.paused(d)
	l.end(e, 800*ms, false)

	unexplained, paused, gaps := l.verdict(time.Second)
	require.Len(t, unexplained, 1)
	assert.Equal(t, "b", unexplained[0].A.Worker)
	assert.Equal(t, "c", unexplained[0].B.Worker)
	assert.Equal(t, 50*ms, unexplained[0].For)
	require.Len(t, paused, 1)
	assert.Equal(t, "e", paused[0].B.Worker)
	assert.Equal(t, []Gap{{100 * ms, 150 * ms}, {500 * ms, 600 * ms}, {800 * ms, time.Second}}, gaps,
		"between windows, and after the last one")
}

func TestLedgerClosesOpenWindowsAtTheEnd(t *testing.T) {
	var l ledger
	l.grant("a", 1, 0)
	l.grant("b", 2, 900*ms) // a never ended: it overlaps b
	unexplained, _, _ := l.verdict(time.Second)
	require.Len(t, unexplained, 1)
	assert.Equal(t, 100*ms, unexplained[0].For)
}

func TestLedgerFencesWrites(t *testing.T) {
	var l ledger
	old := l.grant("a", 5, 0)
	l.paused(old)
	l.grant("b", 6, 10*ms)              // b's first write raises the fence to 6
	assert.False(t, l.write(old))       // a wakes up and writes: rejected
	assert.Equal(t, 1, l.staleRejected) // and counted as what fencing is for
	assert.Zero(t, l.holderFenced)

	// Tokens that go back: the new holder is fenced out, and the grant
	// is out of order. Both are violations.
	l.grant("c", 4, 20*ms)
	assert.Equal(t, 1, l.outOfOrder)
	assert.Equal(t, 1, l.holderFenced)
	assert.Equal(t, 2, l.accepted)
}

func TestReportViolations(t *testing.T) {
	r := &Report{Grants: 3, Bound: time.Second, Stalls: []Gap{{0, 2 * time.Second}}, StaleAccepted: 1,
		Recoveries: []Recovery{{Stalled: true}, {}}}
	assert.Len(t, r.Violations(), 3)
	r = &Report{Grants: 3, Bound: time.Second, PausedOverlaps: []Overlap{{}}, StaleRejected: 4}
	assert.Empty(t, r.Violations(), "what a pause causes is reported, not failed")
	assert.NotEmpty(t, (&Report{Bound: time.Second}).Violations(), "no grant at all")
}

func TestStallsDiscountTheTimeFaultsKeptTheServersDown(t *testing.T) {
	sec := time.Second
	gaps := []Gap{{0, 5 * sec}, {10 * sec, 30 * sec}, {40 * sec, 52 * sec}}
	outages := []Recovery{
		{Outage: Outage{Kind: FaultQuorum, At: 8 * sec, Cleared: 20 * sec}}, // 10 s of the second gap
		{Outage: Outage{Kind: FaultKill, At: 41 * sec, Cleared: 41 * sec}},  // others take over: no discount
	}
	got := stalls(gaps, outages, 10*sec)
	assert.Equal(t, []Gap{{40 * sec, 52 * sec}}, got)
}
