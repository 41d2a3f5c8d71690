package client

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nextObservation reads the next observation, failing after wait.
func nextObservation(t *testing.T, ch <-chan Observation) Observation {
	t.Helper()
	select {
	case o, ok := <-ch:
		require.True(t, ok, "the observation stream ended")
		return o
	case <-time.After(wait):
		t.Fatal("no observation")
	}
	return Observation{}
}

// observeUntil reads observations until one satisfies ok.
func observeUntil(t *testing.T, ch <-chan Observation, ok func(Observation) bool) Observation {
	t.Helper()
	for {
		if o := nextObservation(t, ch); ok(o) {
			return o
		}
	}
}

// A follower sees no leader, then each term with its value and token, a
// new value, the candidates, and the next term at once after a resign.
func TestRealElection(t *testing.T) {
	srv := startRealServer(t)
	c := newClient(t, srv.Addr, 5*time.Second)
	ctx, cancel := context.WithCancel(ctxTimeout(t, wait))
	defer cancel()
	obs, err := c.Observe(ctx, "svc/leader")
	require.NoError(t, err)
	assert.Equal(t, NoLeader, nextObservation(t, obs).State)

	a, err := c.Campaign(ctx, "svc/leader", []byte("10.0.0.7:80"))
	require.NoError(t, err)
	o := observeUntil(t, obs, func(o Observation) bool { return o.State == Leading })
	assert.Equal(t, a.Token(), o.Token)
	assert.Equal(t, "10.0.0.7:80", string(o.Value))

	require.NoError(t, a.Proclaim(ctx, []byte("10.0.0.7:81")))
	o = observeUntil(t, obs, func(o Observation) bool { return string(o.Value) == "10.0.0.7:81" })
	assert.Equal(t, a.Token(), o.Token, "a new value, the same term")

	elected := make(chan *Term, 1)
	go func() {
		b, err := c.Campaign(ctx, "svc/leader", []byte("10.0.0.8:80"))
		assert.NoError(t, err)
		elected <- b
	}()
	o = observeUntil(t, obs, func(o Observation) bool { return o.Candidates == 1 })
	assert.Equal(t, a.Token(), o.Token)

	require.NoError(t, a.Resign())
	b := receive(t, elected)
	defer b.Resign()
	o = observeUntil(t, obs, func(o Observation) bool { return o.State == Leading && o.Token != a.Token() })
	assert.Equal(t, b.Token(), o.Token)
	assert.Equal(t, "10.0.0.8:80", string(o.Value))
	assert.Greater(t, b.Token(), a.Token())

	now, err := c.Leader(ctx, "svc/leader")
	require.NoError(t, err)
	assert.Equal(t, Leading, now.State)
	assert.Equal(t, b.Token(), now.Token)
	cancel()
	for range obs {
	}
}

// A follower whose server goes silent says unknown by 0.8 x lease after
// its last acknowledged heartbeat, never the old leader.
func TestRealObserverSaysUnknownWhenTheServerGoesSilent(t *testing.T) {
	srv := startRealServer(t)
	proxy := newPartitionProxy(t, srv.Addr)
	const lease = 400 * time.Millisecond
	leader := newClient(t, srv.Addr, 5*time.Second)
	term, err := leader.Campaign(ctxTimeout(t, wait), "p", []byte("x"))
	require.NoError(t, err)
	defer term.Resign()

	follower := newClient(t, proxy.ln.Addr().String(), lease)
	w, err := follower.Watch(ctxTimeout(t, wait), "p")
	require.NoError(t, err)
	defer w.Close()
	assert.Equal(t, Leading, w.Leader().State)
	time.Sleep(300 * time.Millisecond) // a few heartbeats go through

	cut := time.Now()
	proxy.partitioned.Store(true)
	for w.State().Known {
		select {
		case <-w.Changed(): // signalled when the picture stops being vouched for, with no event
		case <-time.After(wait):
			t.Fatal("Changed never told of the end of the picture's validity")
		}
	}
	told := time.Since(cut)
	assert.Less(t, told, lease, "unknown told %v after the cut", told)
	st := w.State()
	assert.LessOrEqual(t, st.ValidUntil.Sub(cut), 320*time.Millisecond, "vouched for past 0.8 x lease from the cut")
	assert.Equal(t, LeaderUnknown, w.Leader().State)
}

// Campaign needs a value: followers reach the leader by it.
func TestCampaignNeedsAValue(t *testing.T) {
	c := newClient(t, "127.0.0.1:1", time.Second)
	_, err := c.Campaign(context.Background(), "x", nil)
	require.ErrorContains(t, err, "must not be empty")
}
