package monolock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// leaderRecorder records every Leader it is told of.
type leaderRecorder chan *Leader

func (r leaderRecorder) OnLeader(l *Leader) { r <- l }

func (r leaderRecorder) next(t *testing.T) *Leader {
	t.Helper()
	select {
	case l := <-r:
		return l
	case <-time.After(waitBound):
		t.Fatal("no leader change")
	}
	return nil
}

// A campaign is a term with a value: followers see it with Leader and
// Observe, a Proclaim changes the value under the same token, and a
// Resign leaves no leader.
func TestCampaignObserveLeader(t *testing.T) {
	addr, _ := startServer(t)
	c := newTestClient(t, addr, 5000)
	l, err := c.Leader("svc", 5000)
	require.NoError(t, err)
	assert.Equal(t, LeaderNone, l.State)

	seen := make(leaderRecorder, 16)
	obs, err := c.Observe("svc", NoTimeout, seen)
	require.NoError(t, err)
	defer obs.Stop()
	assert.Equal(t, LeaderNone, seen.next(t).State)

	term, err := c.Campaign("svc", "10.0.0.7:80", 5000, nil)
	require.NoError(t, err)
	got := seen.next(t)
	assert.Equal(t, LeaderLeading, got.State)
	assert.Equal(t, term.TokenString(), got.TokenString)
	assert.Equal(t, "10.0.0.7:80", got.Value)

	require.NoError(t, term.Proclaim("10.0.0.7:81"))
	got = seen.next(t)
	assert.Equal(t, "10.0.0.7:81", got.Value)
	assert.Equal(t, term.Token(), got.Token)

	l, err = c.Leader("svc", 5000)
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.7:81", l.Value)

	term.Resign()
	assert.Equal(t, LeaderNone, seen.next(t).State)
	assert.Equal(t, KindIO, ErrorKind(term.Proclaim("x")), "a resigned term cannot proclaim")

	_, err = c.Campaign("svc", "", 5000, nil)
	assert.Equal(t, KindValidation, ErrorKind(err))
}
