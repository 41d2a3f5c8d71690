package monolock

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/client"
	"github.com/monolock/monolock/go/internal/server"
	"github.com/monolock/monolock/go/internal/testserver"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// waitBound turns a hang into a failure; it is far above any expected delay.
const waitBound = 10 * time.Second

// startServer runs a real server on a loopback port; stop ends it early
// (idempotent), as a crash of the lock service would.
func startServer(t *testing.T) (addr string, stop func()) {
	t.Helper()
	srv := testserver.Start(t, server.Config{}, waitBound)
	stop = func() { require.NoError(t, srv.Stop()) }
	t.Cleanup(stop)
	return srv.Addr, stop
}

func newTestClient(t *testing.T, addr string, leaseMillis int64) *Client {
	t.Helper()
	cfg := NewConfig()
	cfg.Servers = addr
	cfg.LeaseMillis = leaseMillis
	c, err := NewClient(cfg)
	require.NoError(t, err)
	return c
}

// lostRecorder is a LostListener that records its calls.
type lostRecorder struct {
	mu    sync.Mutex
	calls []string
	first chan struct{}
}

func newLostRecorder() *lostRecorder { return &lostRecorder{first: make(chan struct{})} }

func (r *lostRecorder) OnLost(code int, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, fmt.Sprintf("%d|%s", code, reason))
	if len(r.calls) == 1 {
		close(r.first)
	}
}

func (r *lostRecorder) wait(t *testing.T) []string {
	t.Helper()
	select {
	case <-r.first:
	case <-time.After(waitBound):
		t.Fatal("OnLost was not called")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}

func TestNewConfigHasTheGoClientDefaults(t *testing.T) {
	cfg := NewConfig()
	require.Equal(t, client.DefaultServer, cfg.Servers)
	require.Equal(t, client.DefaultLease.Milliseconds(), cfg.LeaseMillis)
	require.Equal(t, client.DefaultDialTimeout.Milliseconds(), cfg.DialTimeoutMillis)
	_, err := NewClient(nil)
	require.NoError(t, err)
}

func TestInvalidConfigIsRefusedWithKindAndCode(t *testing.T) {
	for _, tc := range []struct {
		desc   string
		change func(*Config)
		kind   string
		code   int
	}{
		{"lease 0", func(c *Config) { c.LeaseMillis = 0 }, KindValidation, 0x17},
		{"lease above uint32", func(c *Config) { c.LeaseMillis = 1 << 32 }, KindValidation, 0x17},
		{"negative lease", func(c *Config) { c.LeaseMillis = -5 }, KindValidation, 0x17},
		{"no server", func(c *Config) { c.Servers = "" }, KindConfig, NoCode},
		{"empty server in list", func(c *Config) { c.Servers = "a:1,,b:2" }, KindConfig, NoCode},
		{"port out of range", func(c *Config) { c.Servers = "a:65536" }, KindConfig, NoCode},
		{"dial timeout 0", func(c *Config) { c.DialTimeoutMillis = 0 }, KindConfig, NoCode},
		{"root CAs without a certificate", func(c *Config) { c.RootCAsPEM = []byte("not PEM") }, KindConfig, NoCode},
		{"client key without certificate", func(c *Config) { c.ClientKeyPEM = []byte("x") }, KindConfig, NoCode},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			cfg := NewConfig()
			tc.change(cfg)
			c, err := NewClient(cfg)
			require.Nil(t, c)
			require.Error(t, err)
			require.Equal(t, tc.kind, ErrorKind(err))
			require.Equal(t, tc.code, ErrorCode(err))
			require.False(t, ErrorTemporary(err))
			if tc.code == 0x17 {
				require.Contains(t, err.Error(), "lease must be a whole number of milliseconds from 1 ms to 4294967295 ms")
			}
		})
	}
}

func TestServerListIsTrimmed(t *testing.T) {
	addr, _ := startServer(t)
	cfg := NewConfig()
	cfg.Servers = " 127.0.0.1:1 , " + addr + " " // first one refuses connections
	c, err := NewClient(cfg)
	require.NoError(t, err)
	l, err := c.TryAcquire("trimmed")
	require.NoError(t, err)
	l.Unlock()
}

// The client_invalid vectors of spec/vectors/frames.json: each is refused
// before any byte is sent, with its code and kind validation.
func TestSpecInvalidInputsAreRefusedBeforeSending(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "spec", "vectors", "frames.json"))
	require.NoError(t, err)
	var vectors struct {
		ClientInvalid []struct {
			Desc    string `json:"desc"`
			NameHex string `json:"name_hex"`
			LeaseMS int64  `json:"lease_ms"`
			Code    int    `json:"code"`
		} `json:"client_invalid"`
	}
	require.NoError(t, json.Unmarshal(raw, &vectors))
	require.NotEmpty(t, vectors.ClientInvalid)

	// A listener that fails the test if anything connects.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	connected := make(chan struct{}, 1)
	go func() {
		if conn, err := ln.Accept(); err == nil {
			conn.Close()
			connected <- struct{}{}
		}
	}()
	for _, v := range vectors.ClientInvalid {
		t.Run(v.Desc, func(t *testing.T) {
			name, err := hex.DecodeString(v.NameHex)
			require.NoError(t, err)
			cfg := NewConfig()
			cfg.Servers = ln.Addr().String()
			cfg.LeaseMillis = v.LeaseMS
			c, err := NewClient(cfg)
			if err == nil {
				_, err = c.TryAcquire(string(name))
			}
			require.Error(t, err)
			require.Equal(t, KindValidation, ErrorKind(err))
			require.Equal(t, v.Code, ErrorCode(err))
			require.Contains(t, err.Error(), fmt.Sprintf("code 0x%02x", v.Code))
		})
	}
	select {
	case <-connected:
		t.Fatal("a refused input reached the server")
	default:
	}
}

func TestClassifyMapsEveryGoClientError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		kind string
		code int
	}{
		{protocol.ErrNameTooLong, KindValidation, 0x15},
		{fmt.Errorf("x: %w", client.ErrBusy), KindBusy, NoCode},
		{fmt.Errorf("acquire: %w (last attempt: %w)", context.DeadlineExceeded, &client.ServerError{Code: 1}), KindTimeout, NoCode},
		{fmt.Errorf("acquire: %w", context.Canceled), KindCancelled, NoCode},
		{&client.ServerError{Code: 0x18, Reason: "no"}, KindServer, 0x18},
		{&client.ServerError{Code: 0xee}, KindServer, 0xee},
		{fmt.Errorf("%w: %w", client.ErrUnavailable, errors.New("refused")), KindConnect, NoCode},
		{fmt.Errorf("%w: %w", client.ErrLockLost, client.ErrClientTimeout), KindTimeout, NoCode},
		{fmt.Errorf("%w: %w", client.ErrLockLost, &client.ServerError{Code: 2}), KindServer, 2},
		{fmt.Errorf("%w: %w", client.ErrLockLost, errors.New("EOF")), KindIO, NoCode},
	} {
		f := classify(tc.err)
		require.Equal(t, tc.kind, f.kind, "%v", tc.err)
		require.Equal(t, tc.code, f.code, "%v", tc.err)
		require.ErrorIs(t, f, tc.err)
	}
	require.Nil(t, classify(nil))
	require.Equal(t, "", ErrorKind(errors.New("not ours")))
	require.Equal(t, NoCode, ErrorCode(nil))
	require.True(t, ErrorTemporary(classify(&client.ServerError{Code: 0x02})))
	require.True(t, ErrorTemporary(classify(&client.ServerError{Code: 0x0f})), "unknown codes below 0x10 are temporary")
	require.False(t, ErrorTemporary(classify(&client.ServerError{Code: 0x10})))
}

func TestAcquireBusyUnlockReacquire(t *testing.T) {
	addr, _ := startServer(t)
	c := newTestClient(t, addr, 10000)

	first, err := c.Acquire("jobs/x", 5000, nil)
	require.NoError(t, err)
	require.Equal(t, "jobs/x", first.Name())
	require.Positive(t, first.Token())
	require.Equal(t, fmt.Sprint(first.Token()), first.TokenString())
	require.True(t, first.IsHeld())
	require.InDelta(t, time.Now().Add(8*time.Second).UnixMilli(), first.ValidUntilMillis(), 2000)
	require.Greater(t, first.ValidForMillis(), int64(6000))

	_, err = c.TryAcquire("jobs/x")
	require.Equal(t, KindBusy, ErrorKind(err))
	require.Equal(t, NoCode, ErrorCode(err))

	first.Unlock()
	first.Unlock() // idempotent
	require.False(t, first.IsHeld())
	require.False(t, first.IsLost())
	require.Equal(t, "", first.LostKind())

	// Unlock returned once the server had let the lock go: the next grant
	// carries a larger token.
	second, err := c.Acquire("jobs/x", waitBound.Milliseconds(), nil)
	require.NoError(t, err)
	require.Greater(t, second.Token(), first.Token())
	second.Unlock()
}

func TestAcquireWaitsAndHearsWaiting(t *testing.T) {
	addr, _ := startServer(t)
	holder, err := newTestClient(t, addr, 10000).Acquire("q", NoTimeout, nil)
	require.NoError(t, err)

	waiting := make(chan string, 4)
	cfg := NewConfig()
	cfg.Servers = addr
	cfg.Waiting = waitingFunc(func(name string) { waiting <- name })
	c, err := NewClient(cfg)
	require.NoError(t, err)
	got := make(chan *Lock, 1)
	go func() {
		l, err := c.Acquire("q", NoTimeout, nil)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	select {
	case name := <-waiting:
		require.Equal(t, "q", name)
	case <-time.After(waitBound):
		t.Fatal("no OnWaiting")
	}
	holder.Unlock()
	select {
	case l := <-got:
		require.Greater(t, l.Token(), holder.Token())
		l.Unlock()
	case <-time.After(waitBound):
		t.Fatal("the waiter was not granted the lock")
	}
}

type waitingFunc func(string)

func (f waitingFunc) OnWaiting(name string) { f(name) }

func TestTimeoutAndCancel(t *testing.T) {
	addr, _ := startServer(t)
	c := newTestClient(t, addr, 10000)
	holder, err := c.Acquire("busy", NoTimeout, nil)
	require.NoError(t, err)
	defer holder.Unlock()

	_, err = c.Acquire("busy", 100, nil)
	require.Equal(t, KindTimeout, ErrorKind(err))

	cancel := NewCanceller()
	require.False(t, cancel.IsCancelled())
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire("busy", NoTimeout, cancel)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond) // let it queue; the result is the same either way
	cancel.Cancel()
	select {
	case err := <-done:
		require.Equal(t, KindCancelled, ErrorKind(err))
	case <-time.After(waitBound):
		t.Fatal("Cancel did not end Acquire")
	}
	require.True(t, cancel.IsCancelled())
	_, err = c.Acquire("free", NoTimeout, cancel) // single-use
	require.Equal(t, KindCancelled, ErrorKind(err))
	require.True(t, (&Canceller{}).IsCancelled() == false, "the zero Canceller works")
}

func TestLostListenerHearsServerShutdownOnce(t *testing.T) {
	addr, stop := startServer(t)
	l, err := newTestClient(t, addr, 10000).Acquire("doomed", NoTimeout, nil)
	require.NoError(t, err)
	rec := newLostRecorder()
	l.SetLostListener(rec)
	stop() // graceful shutdown: ERROR 0x01 to every session
	calls := rec.wait(t)
	require.Len(t, calls, 1)
	require.Regexp(t, `^1\|.*server shutting down`, calls[0])
	require.True(t, l.IsLost())
	require.False(t, l.IsHeld())
	require.Equal(t, KindServer, l.LostKind())
	require.Equal(t, 1, l.LostCode())

	// A listener set after the loss hears it at once; the first is not called again.
	late := newLostRecorder()
	l.SetLostListener(late)
	require.Len(t, late.wait(t), 1)
	l.Unlock()
	require.True(t, l.IsLost(), "unlocking a lost lock keeps it lost")
	rec.mu.Lock()
	require.Len(t, rec.calls, 1)
	rec.mu.Unlock()
}

func TestUnlockDoesNotCallTheLostListener(t *testing.T) {
	addr, _ := startServer(t)
	l, err := newTestClient(t, addr, 10000).Acquire("fine", NoTimeout, nil)
	require.NoError(t, err)
	rec := newLostRecorder()
	l.SetLostListener(rec)
	l.Unlock()
	l.SetLostListener(rec) // also not when set after Unlock
	select {
	case <-rec.first:
		t.Fatal("OnLost called for an unlocked lock")
	case <-time.After(200 * time.Millisecond):
	}
}

func TestConnectFailureIsKindConnect(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	_, err = newTestClient(t, addr, 1000).TryAcquire("x")
	require.Equal(t, KindConnect, ErrorKind(err))
}

func TestZeroLockHoldsNothing(t *testing.T) {
	var l Lock // what new Lock() in Java makes
	require.False(t, l.IsHeld())
	require.False(t, l.IsLost())
	require.Zero(t, l.Token())
	require.Equal(t, "0", l.TokenString())
	require.Zero(t, l.ValidForMillis())
	require.Equal(t, "", l.Name())
	l.SetLostListener(newLostRecorder())
	l.Unlock()
}
