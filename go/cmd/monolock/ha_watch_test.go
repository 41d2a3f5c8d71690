package main

import (
	"bufio"
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/client"
	"github.com/monolock/monolock/go/internal/testetcd"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// rawWatch sends a WATCH on a new connection and returns it.
func rawWatch(t *testing.T, addr, name string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, wait)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	frame, err := protocol.AppendWatch(nil, protocol.Watch{LeaseMS: 1000, Name: name})
	require.NoError(t, err)
	_, err = c.Write(frame)
	require.NoError(t, err)
	return c
}

// In a cell, a passive server sends a watch to the active one (0x03 with
// its address), the Go client follows it there, and after the leader is
// killed the follower says unknown, never shows the dead leader's term
// again, and comes back under a new epoch to see the next term.
func TestHAWatchFollowsTheLeaderAcrossAFailover(t *testing.T) {
	etcd := testetcd.Start(t)
	addrA, addrB := testetcd.FreePort(t), testetcd.FreePort(t)
	a := cellServer(t, etcd, addrA)
	a.WaitLog(0, wait, "ha: leading the cell")
	cellServer(t, etcd, addrB)
	require.Eventually(t, func() bool {
		typ, _, code, reason, err := readFrame(t, rawWatch(t, addrB, "leader"), wait)
		require.NoError(t, err)
		require.Equal(t, protocol.MsgError, typ)
		require.Equal(t, protocol.ErrNotActive.Code, code)
		return reason == addrA
	}, wait, 50*time.Millisecond, "the passive server names the leader")

	ctx, cancel := context.WithTimeout(context.Background(), 4*wait)
	defer cancel()
	c, err := client.New(client.WithServers(addrB, addrA), client.WithLease(time.Second))
	require.NoError(t, err)
	obs, err := c.Observe(ctx, "leader")
	require.NoError(t, err)
	next := func() client.Observation {
		t.Helper()
		select {
		case o := <-obs:
			return o
		case <-ctx.Done():
			t.Fatal("no observation")
		}
		return client.Observation{}
	}
	require.Equal(t, client.NoLeader, next().State)
	term, err := c.Campaign(ctx, "leader", []byte("A"))
	require.NoError(t, err)
	first := next()
	require.Equal(t, client.Leading, first.State)
	require.Equal(t, term.Token(), first.Token)

	candidate := make(chan *client.Term, 1)
	go func() {
		t2, err := c.Campaign(ctx, "leader", []byte("B"))
		if err != nil {
			t.Errorf("candidate: %v", err)
		}
		candidate <- t2
	}()
	require.Equal(t, 1, next().Candidates)

	require.NoError(t, a.Cmd.Process.Kill())
	<-term.Done()
	var sawUnknown bool
	for {
		o := next()
		if o.State == client.LeaderUnknown {
			sawUnknown = true
			continue
		}
		require.True(t, sawUnknown, "the follower went from the dead leader's term to %v without saying unknown", o.State)
		require.NotEqual(t, term.Token(), o.Token, "the dead leader's term shown after the failover: %+v", o)
		if o.State == client.Leading {
			t2 := <-candidate
			require.NotNil(t, t2)
			assert.Equal(t, t2.Token(), o.Token)
			assert.Equal(t, "B", string(o.Value))
			assert.Greater(t, o.Token, term.Token())
			require.NoError(t, t2.Resign())
			return
		}
		t.Logf("after the failover: %v (token %d, for %v)", o.State, o.Token, time.Until(o.Until).Round(time.Millisecond))
	}
}

// readWatchFrame reads one WATCHING or EVENT from a raw watch (r reads
// conn) and returns the event (zero for a WATCHING).
func readWatchFrame(t *testing.T, conn net.Conn, r *bufio.Reader) protocol.Event {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(wait))
	typ, err := r.ReadByte()
	require.NoError(t, err)
	switch typ {
	case protocol.MsgWatching:
		_, _, err = protocol.ReadWatchingBody(r)
		require.NoError(t, err)
		return protocol.Event{}
	case protocol.MsgEvent:
		e, err := protocol.ReadEventBody(r)
		require.NoError(t, err)
		return e
	}
	t.Fatalf("a watch got message type 0x%02x", typ)
	return protocol.Event{}
}
