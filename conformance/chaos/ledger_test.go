package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const ms = time.Millisecond

func TestLedgerClosesOpenWindowsAtTheEnd(t *testing.T) {
	var l ledger
	a := l.grant("a", "x", false, 1, 0)
	l.end(a, 100*ms, true)
	l.grant("b", "x", false, 2, 900*ms)
	l.grant("c", "y", false, 3, 950*ms)
	ws := l.closed("x", time.Second)
	require.Len(t, ws, 2, "only the lock asked for")
	assert.Equal(t, 100*ms, ws[0].End)
	assert.True(t, ws[0].Lost)
	assert.Equal(t, time.Second, ws[1].End, "still open: closed at the end")
}

func TestLedgerFencesExclusiveWrites(t *testing.T) {
	var l ledger
	old := l.grant("a", "x", false, 5, 0)
	l.paused(old)
	l.grant("b", "x", false, 6, 10*ms)  // b's first write raises the fence to 6
	assert.False(t, l.write(old))       // a wakes up and writes: rejected
	assert.Equal(t, 1, l.staleRejected) // and counted as what fencing is for
	assert.Zero(t, l.holderFenced)

	// Tokens that go back: the new holder is fenced out, and the grant
	// is out of order. Both are violations.
	l.grant("c", "x", false, 4, 20*ms)
	assert.Equal(t, 1, l.outOfOrder)
	assert.Equal(t, 1, l.holderFenced)
	assert.Equal(t, 2, l.accepted)

	// Another lock has a fence of its own, and its tokens may reach the
	// harness in any order beside this lock's.
	l.grant("d", "y", false, 3, 30*ms)
	assert.Equal(t, 1, l.outOfOrder)
	assert.Equal(t, 3, l.accepted)
}

func TestLedgerFencesSharedWritesOnlyAgainstExclusiveOnes(t *testing.T) {
	var l ledger
	// Two readers granted together; the later token's grant is read first.
	r2 := l.grant("r2", "x", true, 6, 0)
	r1 := l.grant("r1", "x", true, 5, 1*ms)
	assert.True(t, l.write(r2))
	assert.True(t, l.write(r1), "a reader's lower token is no reason to turn it away")
	assert.Zero(t, l.outOfOrder+l.holderFenced+l.staleAccepted)

	// A writer after both, while r1's process was stopped: r1's next
	// write is stale and rejected.
	l.paused(r1)
	l.grant("w", "x", false, 7, 10*ms)
	assert.False(t, l.write(r1))
	assert.Equal(t, 1, l.staleRejected)

	// A reader granted after the writer must carry a higher token...
	l.grant("r3", "x", true, 8, 20*ms)
	assert.Zero(t, l.outOfOrder)
	// ...and one that does not is out of order and fenced out.
	l.grant("r0", "x", true, 4, 30*ms)
	assert.Equal(t, 1, l.outOfOrder)
	assert.Equal(t, 1, l.holderFenced)

	// A writer's token must be above the readers' too.
	l.grant("w2", "x", false, 8, 40*ms)
	assert.Equal(t, 2, l.outOfOrder)
}

func TestReportViolations(t *testing.T) {
	x := LockStats{Lock: Lock{Name: "x", Exclusive: 1}, Grants: 3}
	r := &Report{Locks: []LockStats{x}, Grants: 3, Bound: time.Second, Stalls: []Gap{{"x", 0, 2 * time.Second}}, StaleAccepted: 1,
		Recoveries: []Recovery{{Stalled: true}, {}}}
	assert.Len(t, r.Violations(), 3)
	r = &Report{Locks: []LockStats{x}, Grants: 3, Bound: time.Second, PausedBreaches: []Breach{{}}, StaleRejected: 4}
	assert.Empty(t, r.Violations(), "what a pause causes is reported, not failed")
	r.Breaches = []Breach{{Lock: x.Lock, Most: 2}}
	assert.Len(t, r.Violations(), 1)
	r = &Report{Locks: []LockStats{x, {Lock: Lock{Name: "y"}}}, Grants: 3, Bound: time.Second}
	assert.Equal(t, []string{"no grant of y at all"}, r.Violations())
}

func TestStallsDiscountTheTimeFaultsKeptTheServersDown(t *testing.T) {
	sec := time.Second
	gaps := []Gap{{"x", 0, 5 * sec}, {"x", 10 * sec, 30 * sec}, {"y", 40 * sec, 52 * sec}}
	outages := []Recovery{
		{Outage: Outage{Kind: FaultQuorum, At: 8 * sec, Cleared: 20 * sec}}, // 10 s of the second gap
		{Outage: Outage{Kind: FaultKill, At: 41 * sec, Cleared: 41 * sec}},  // others take over: no discount
	}
	got := stalls(gaps, outages, 10*sec)
	assert.Equal(t, []Gap{{"y", 40 * sec, 52 * sec}}, got)
}
