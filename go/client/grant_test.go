package client

// The ACQUIRE the client sends and the grants it reads, to the byte: the
// spec's frames, the token range and frames split across reads.

import (
	"context"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/testspec"
)

func TestAcquireFramesMatchVectors(t *testing.T) {
	var vec struct {
		ClientValid []struct {
			Desc    string `json:"desc"`
			Type    string `json:"type"`
			Name    string `json:"name"`
			LeaseMS int64  `json:"lease_ms"`
			Hex     string `json:"hex"`
		} `json:"client_valid"`
	}
	testspec.Load(t, "vectors/frames.json", &vec)
	srv := newFakeServer(t)
	seen := 0
	for _, v := range vec.ClientValid {
		if v.Type != "ACQUIRE" {
			continue
		}
		seen++
		t.Run(v.Desc, func(t *testing.T) {
			want, err := hex.DecodeString(v.Hex)
			require.NoError(t, err)
			c := newClient(t, srv.addr(), time.Duration(v.LeaseMS)*time.Millisecond)
			res := acquireAsync(context.Background(), c, v.Name, true)
			conn := srv.accept()
			conn.expect(want)
			conn.send(waiting())
			// A 1 ms lease may time out before WAITING arrives; either way
			// nothing is held.
			r := result(t, res)
			require.Nil(t, r.lock)
			require.Error(t, r.err)
		})
	}
	require.Greater(t, seen, 3)
}

func TestGrantAtOnce(t *testing.T) {
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), 2*time.Second)
	start := time.Now()
	res := acquireAsync(context.Background(), c, "jobs/x", false)
	conn := srv.accept()
	tA := conn.expectAcquire("jobs/x", 2*time.Second)
	conn.send(acquired(9007199254740993))
	r := result(t, res)
	require.NoError(t, r.err)
	lock := r.lock
	require.Equal(t, "jobs/x", lock.Name())
	require.Equal(t, uint64(9007199254740993), lock.Token())
	require.NoError(t, lock.Err())
	// Valid from the ACQUIRE's send (between start and its arrival) + 0.8 x lease.
	vu := lock.ValidUntil()
	require.False(t, vu.Before(start.Add(1600*time.Millisecond)), "valid until %v too early", vu.Sub(start))
	require.False(t, vu.After(tA.Add(1600*time.Millisecond)), "valid until %v after arrival+timeout", vu.Sub(tA))
	select {
	case <-lock.Done():
		t.Fatal("Done closed while held")
	default:
	}

	require.NoError(t, lock.Release())
	conn.expectClosed()
	require.ErrorIs(t, lock.Err(), ErrReleased)
	require.NotErrorIs(t, lock.Err(), ErrLockLost)
	lockDone(t, lock)
	require.NoError(t, lock.Release(), "Release is idempotent")
	require.Equal(t, vu, lock.ValidUntil(), "validity stays where it was")
}

func TestLargestToken(t *testing.T) {
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), 2*time.Second)
	res := acquireAsync(context.Background(), c, "t", false)
	conn := srv.accept()
	conn.expectAcquire("t", 2*time.Second)
	conn.send(acquired(1<<64 - 1))
	r := result(t, res)
	require.NoError(t, r.err)
	require.Equal(t, uint64(1<<64-1), r.lock.Token())
	require.NoError(t, r.lock.Release())
}

func TestSplitFrames(t *testing.T) {
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), 400*time.Millisecond)
	res := acquireAsync(context.Background(), c, "split", false)
	conn := srv.accept()
	conn.expectAcquire("split", 400*time.Millisecond)
	conn.sendSplit(acquired(0x0102030405060708), 2*time.Millisecond)
	r := result(t, res)
	require.NoError(t, r.err)
	require.Equal(t, uint64(0x0102030405060708), r.lock.Token())
	conn.expectHeartbeat()
	conn.sendSplit(acquired(0x0102030405060708), time.Millisecond)
	conn.expectHeartbeat()
	// An ERROR ends the session at its type byte: with the code in the
	// same read the loss carries it, and the reason that follows in later
	// reads is never waited for.
	e := errFrame(0x02, "geschlossen – Wartung")
	conn.send(e[:2])
	lockDone(t, r.lock)
	var se *ServerError
	require.ErrorAs(t, r.lock.Err(), &se)
	require.Equal(t, uint8(0x02), se.Code)
	require.Empty(t, se.Reason)
}

func TestErrorTypeByteOnly(t *testing.T) {
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), 10*time.Second)
	res := acquireAsync(context.Background(), c, "cut", false)
	conn := srv.accept()
	conn.expectAcquire("cut", 10*time.Second)
	conn.send(acquired(3))
	r := result(t, res)
	require.NoError(t, r.err)
	start := time.Now()
	conn.send([]byte{0x13}) // and nothing more, the socket left open
	lockDone(t, r.lock)
	require.Less(t, time.Since(start), time.Second, "told at the type byte, not at the deadline")
	require.ErrorIs(t, r.lock.Err(), ErrLockLost)
	require.ErrorIs(t, r.lock.Err(), ErrServerEnded)
	var se *ServerError
	require.False(t, errors.As(r.lock.Err(), &se), "no code, no ServerError")
}
