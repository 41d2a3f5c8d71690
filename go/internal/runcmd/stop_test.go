//go:build unix

package runcmd

import (
	"bytes"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/client"
	"github.com/monolock/monolock/go/internal/proctree"
	"github.com/monolock/monolock/go/pkg/protocol"
)

func TestGraceForFitsTheLease(t *testing.T) {
	const ms = time.Millisecond
	// Without --grace: all of 0.2 x lease but the kill allowance and the
	// work gap, 0.05 x lease.
	g, err := graceFor(10*time.Second, 0, false)
	require.NoError(t, err)
	assert.Equal(t, 2*time.Second-killAllowance-500*ms, g)
	g, err = graceFor(leaseFor(0), 0, false)
	require.NoError(t, err)
	assert.Less(t, g, ms, "the shortest lease: SIGKILL with SIGTERM, within the millisecond of the lease's rounding")
	_, err = graceFor(leaseFor(0)-ms, 0, false)
	require.ErrorContains(t, err, "use --lease "+leaseFor(0).String()+" or more")

	// A --grace that fits is kept, one that does not is refused with the
	// lease that would fit it, which then does.
	g, err = graceFor(10*time.Second, 300*ms, true)
	require.NoError(t, err)
	assert.Equal(t, 300*ms, g)
	_, err = graceFor(10*time.Second, 10*time.Second, true)
	require.EqualError(t, err, "--grace 10s does not fit --lease 10s: SIGTERM, SIGKILL, the 250ms that SIGKILL needs to finish and the 0.05 x lease = 500ms kept between this command's end and the next holder's start must fall within the 0.2 x lease = 2s between a lost lock and the server's next grant; use --lease 1m8.334s or more for this --grace, or --grace 1.25s at most with this lease")
	for _, grace := range []time.Duration{0, 1, 333 * ms, 1500*time.Microsecond + 1, 7 * time.Second} {
		lease := leaseFor(grace)
		assert.Zero(t, lease%ms, "a lease the protocol carries")
		_, err := graceFor(lease, grace, true)
		assert.NoError(t, err, "grace %v in lease %v", grace, lease)
		_, err = graceFor(lease-ms, grace, true)
		assert.Error(t, err, "grace %v in lease %v", grace, lease-ms)
	}
	_, err = graceFor(10*time.Second, 1000*time.Hour, true)
	require.ErrorContains(t, err, "longer than any lease can fit")
}

func TestPlanStop(t *testing.T) {
	now := time.Now()
	end := now.Add(2 * time.Second)
	const gap = 100 * time.Millisecond
	// The grace fits: SIGKILL after it, the wait until the lease end.
	p := planStop(now, end, time.Second, gap)
	assert.Equal(t, now.Add(time.Second), p.kill)
	assert.Equal(t, end, p.giveUp)
	// A loss noticed late (or a long grace after an early loss): SIGKILL
	// the allowance and the work gap before the lease end.
	p = planStop(now, end, 5*time.Second, gap)
	assert.Equal(t, end.Add(-killAllowance-gap), p.kill)
	assert.Equal(t, end, p.giveUp)
	// Past the lease end already: SIGKILL at once, and the allowance to
	// finish before what is left is reported.
	p = planStop(now, now.Add(-time.Second), time.Second, gap)
	assert.Equal(t, now, p.kill)
	assert.Equal(t, now.Add(killAllowance), p.giveUp)
}

func TestReportStopTellsEveryLeftover(t *testing.T) {
	var out bytes.Buffer
	r := &runner{log: slog.New(newHumanHandler(&out, slog.LevelWarn))}
	r.reportStop(stopReport{phase: stopOverdue, processes: 3, killed: 2,
		left: []proctree.Proc{{Pid: 41, Comm: "dd", State: 'D'}}})
	assert.Equal(t, "monolock run: pid 41 (dd) is still alive, in state D (uninterruptible sleep), when the lock can pass on; only the fencing token protects against it now\n"+
		"monolock run: command not fully stopped: 1 of 3 processes still alive when the lock can pass on (2 got SIGKILL)\n", out.String())

	out.Reset()
	r.reportStop(stopReport{phase: stopReaped, processes: 3, killed: 1, margin: 180 * time.Millisecond})
	assert.Equal(t, "monolock run: command stopped: 3 processes dead and reaped (1 needed SIGKILL), 180ms before the lock can pass on\n", out.String())

	// After a kick the lock has passed on already: no margin to tell.
	out.Reset()
	r.reportStop(stopReport{phase: stopReaped, processes: 2, killed: 0, margin: time.Second, kicked: true})
	assert.Equal(t, "monolock run: command stopped: 2 processes dead and reaped (0 needed SIGKILL), after the kick had passed the lock on\n", out.String())
}

func TestKickedIsTheAdministratorsError(t *testing.T) {
	kick := fmt.Errorf("%w: %w", client.ErrLockLost, &client.ServerError{Code: protocol.ErrAdminClosed.Code})
	assert.True(t, kicked(kick))
	shutdown := fmt.Errorf("%w: %w", client.ErrLockLost, &client.ServerError{Code: protocol.ErrShuttingDown.Code})
	assert.False(t, kicked(shutdown))
	assert.False(t, kicked(fmt.Errorf("%w: %w", client.ErrLockLost, client.ErrClientTimeout)))
}
