package client

// ERROR frames from the server, for every code of spec/errors.json, while
// trying, waiting and holding.

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/spec"
	"github.com/monolock/monolock/go/internal/testspec"
	"github.com/monolock/monolock/go/pkg/protocol"
)

type codeCase struct {
	code      uint8
	temporary bool
}

// allCodes lists every code of spec/errors.json and its unknown examples.
func allCodes(t *testing.T) []codeCase {
	var spec struct {
		Errors []struct {
			Code      uint8 `json:"code"`
			Temporary bool  `json:"temporary"`
		} `json:"errors"`
		Unknown []struct {
			Code      uint8 `json:"code"`
			Temporary bool  `json:"temporary"`
		} `json:"unknown_code_examples"`
	}
	testspec.Load(t, "errors.json", &spec)
	var out []codeCase
	for _, e := range spec.Errors {
		out = append(out, codeCase{e.Code, e.Temporary})
	}
	for _, e := range spec.Unknown {
		out = append(out, codeCase{e.Code, e.Temporary})
	}
	require.Greater(t, len(out), 12)
	return out
}

func requireServerError(t *testing.T, err error, cc codeCase, reason string) {
	t.Helper()
	var se *ServerError
	require.ErrorAs(t, err, &se)
	require.Equal(t, cc.code, se.Code)
	require.Equal(t, reason, se.Reason)
	require.Equal(t, cc.temporary, se.Temporary())
	if canonical := protocol.CodeErr(cc.code); canonical != nil {
		require.ErrorIs(t, err, canonical)
	}
	require.Contains(t, se.Error(), "0x")
}

func TestServerErrorMatchesSpec(t *testing.T) {
	for _, cc := range allCodes(t) {
		se := &ServerError{Code: cc.code}
		require.Equal(t, cc.temporary, se.Temporary(), "code 0x%02x", cc.code)
		if canonical := protocol.CodeErr(cc.code); canonical != nil {
			require.ErrorIs(t, se, canonical)
		}
		if cc.code != protocol.ErrNotAuthorized.Code {
			require.NotErrorIs(t, se, protocol.ErrNotAuthorized, "code 0x%02x", cc.code)
		}
		require.ErrorIs(t, error(&ServerError{Code: cc.code, Reason: "x"}), &ServerError{Code: cc.code})
	}
}

func TestErrorWhileTrying(t *testing.T) {
	srv := newFakeServer(t)
	for _, cc := range allCodes(t) {
		c := newClient(t, srv.addr(), 10*time.Second)
		res := acquireAsync(context.Background(), c, "err", true)
		conn := srv.accept()
		conn.expectAcquire("err", 10*time.Second)
		conn.send(errFrame(cc.code, "why"))
		r := result(t, res)
		require.Nil(t, r.lock)
		requireServerError(t, r.err, cc, "why")
		conn.expectClosed()
	}
	srv.noConnection(100 * time.Millisecond) // try never retries
}

// An ERROR that arrives whole is told with its whole reason, up to the
// 255 bytes a reason may have: a 64-byte read cut every ACL refusal at 61.
func TestErrorReasonArrivesWhole(t *testing.T) {
	srv := newFakeServer(t)
	reason := "no ACL rule lets cn:build-agent-07.ci.example.org take it " + strings.Repeat("(and a long tail) ", 10)
	require.LessOrEqual(t, len(reason), spec.MaxReasonLen)
	require.Greater(t, len(reason), 200)
	c := newClient(t, srv.addr(), 10*time.Second)
	res := acquireAsync(context.Background(), c, "acl", true)
	conn := srv.accept()
	conn.expectAcquire("acl", 10*time.Second)
	conn.send(errFrame(protocol.ErrNotAuthorized.Code, reason))
	r := result(t, res)
	var se *ServerError
	require.ErrorAs(t, r.err, &se)
	assert.Equal(t, reason, se.Reason)
}

func TestErrorWhileHolding(t *testing.T) {
	srv := newFakeServer(t)
	for _, cc := range allCodes(t) {
		c := newClient(t, srv.addr(), 10*time.Second)
		lock, conn, _ := grant(t, srv, c, "held", 1)
		conn.send(errFrame(cc.code, ""))
		lockDone(t, lock)
		require.ErrorIs(t, lock.Err(), ErrLockLost)
		requireServerError(t, lock.Err(), cc, "")
		conn.expectClosed()
	}
	srv.noConnection(200 * time.Millisecond) // a lost lock is never re-acquired
}

func TestErrorWhileWaiting(t *testing.T) {
	srv := newFakeServer(t)
	for _, cc := range allCodes(t) {
		var waits atomic.Int32
		c := newClient(t, srv.addr(), 10*time.Second, WithOnWaiting(func(string) { waits.Add(1) }))
		res := acquireAsync(ctxTimeout(t, wait), c, "queue", false)
		conn := srv.accept()
		conn.expectAcquire("queue", 10*time.Second)
		conn.send(waiting())
		conn.send(errFrame(cc.code, "r"))
		conn.expectClosed()
		if !cc.temporary {
			r := result(t, res)
			requireServerError(t, r.err, cc, "r")
			require.Equal(t, int32(1), waits.Load())
			continue
		}
		// Temporary: a new connection, a new place in the queue.
		again := srv.accept()
		again.expectAcquire("queue", 10*time.Second)
		again.send(waiting(), acquired(99))
		r := result(t, res)
		require.NoError(t, r.err, "code 0x%02x", cc.code)
		require.Equal(t, int32(2), waits.Load())
		require.NoError(t, r.lock.Release())
		again.expectClosed()
	}
	srv.noConnection(100 * time.Millisecond)
}
